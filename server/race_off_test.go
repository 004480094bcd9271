//go:build !race

package server_test

// raceBuild: the tests run under the race detector.
const raceBuild = false
