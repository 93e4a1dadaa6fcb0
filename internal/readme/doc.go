// Package readme holds the tests that keep the README's and docs/*.md's Go
// snippets equal to the code they are taken from, and their links pointing
// at files and headings that exist. Each Go block is preceded by a marker
// naming a file of this module and a function in it,
//
//	<!-- snippet: worker/example_tx_test.go ExampleMessage_Commit -->
//
// and the block must be a run of that function's body, compared line by
// line with indentation and runs of blanks ignored; a marker naming a file
// alone (<!-- snippet: examples/quickstart/main.go -->) holds the block to
// the whole file. A block without a marker must be listed, with the
// reason, in the test's unmarked table. The functions are Examples, tests
// and the example programs under examples/, so the code a reader copies
// compiles, and runs in `make test`.
package readme
