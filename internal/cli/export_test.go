package cli

// ApprovalSecret is approvalSecret, for the tests of package cli_test that
// decide, in the test's own process, with the tokens the binary printed.
var ApprovalSecret = approvalSecret

// ExpiryOf is expiryOf, for the test of keys create --expires.
var ExpiryOf = expiryOf

// ServePluginCacheDir is servePluginCacheDir, for the test of serve's
// default plugin_cache_dir.
var ServePluginCacheDir = servePluginCacheDir

// OpenStorage is openStorage, for the test of --storage's options.
var OpenStorage = openStorage
