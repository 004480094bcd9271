package cli

// ApprovalSecret is approvalSecret, for the tests of package cli_test that
// decide, in the test's own process, with the tokens the binary printed.
var ApprovalSecret = approvalSecret
