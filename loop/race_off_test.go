//go:build !race

package loop

const raceBuild = false
