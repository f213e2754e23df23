// Package quickstart holds the test that runs README.md's quickstart, line
// for line, against a database and a NATS server of its own, so that the
// first thing a newcomer pastes cannot go stale. It has no code of its own.
package quickstart
