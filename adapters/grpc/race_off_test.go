//go:build !race

package grpclimit

const raceEnabled = false
