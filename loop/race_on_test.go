//go:build race

package loop

// raceBuild: the race detector drops a quarter of what is put in a
// sync.Pool (crypto/tls keeps its record buffers in one), so allocation
// counts do not hold.
const raceBuild = true
