//go:build !race

package luart_test

const raceEnabled = false
