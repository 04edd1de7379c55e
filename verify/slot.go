package verify

import "github.com/sluice-go/sluice/internal/keyslot"

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, the text between the first '{' and the next '}' when that is
// not empty, else of the whole key, modulo 16384.
func Slot(key string) int { return keyslot.Of(key) }
