// Package layers holds the tests of the project's structure: a broker
// driver links no database client, a storage driver no broker client, and
// the shared vocabulary neither; the public packages are the ones
// docs/architecture.md lists; only conformance suites import testing
// outside tests; and no build output is tracked.
package layers
