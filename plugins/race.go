//go:build race

package plugins

// raceSlowdown scales the default compile deadline in binaries built with
// the race detector, which slows wazero's compiler about tenfold (a 3 MB
// Go plugin: 0.8 s, 7 s with -race, measured here).
const raceSlowdown = 10
