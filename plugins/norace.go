//go:build !race

package plugins

// raceSlowdown scales the default compile deadline in binaries built with
// the race detector; this one is not.
const raceSlowdown = 1
