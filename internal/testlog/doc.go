// Package testlog sends a test's go-hclog output to testing.T.Log without
// the panic a late line causes.
//
// A goroutine that outlives its test (a lease keeper noticing its client
// closed, a connection's reader seeing the reset) may log after the test
// has completed. testing hands such a line to a parent test still
// running, but once every test is done (TestMain after m.Run, waiting for
// goroutines to end) it panics: "Log in goroutine after Test... has
// completed". Writer stops passing lines to t.Log when the test's
// cleanups reach it, under a lock, so no line can race the test's end;
// later lines are dropped (the test's verdict is already out).
//
// OnFailure keeps the lines instead and logs them at the cleanup only if
// the test failed: for busy components whose logs would drown a passing
// test's output.
package testlog
