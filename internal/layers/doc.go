// Package layers holds a test of the project's import rules: a broker
// driver links no database client, a storage driver no broker client, and
// the shared vocabulary neither.
package layers
