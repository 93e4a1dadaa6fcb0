// Package readme holds the test that keeps the README's Go snippets equal to
// the code they are taken from. Each Go block in README.md is preceded by a
// marker naming a file of this module and a function in it,
//
//	<!-- snippet: worker/example_tx_test.go ExampleMessage_Commit -->
//
// and the block must be a run of that function's body, compared line by
// line with indentation and runs of blanks ignored. A block without a marker
// must be listed, with the reason, in the test's unmarked table. The
// functions are Examples and tests, so the code a reader copies compiles and
// runs in `make test`.
package readme
