// Package quickstart holds the tests that run README.md's quickstart, line
// for line, against a database and a NATS server of their own, and with the
// README's RabbitMQ lines against the local RabbitMQ, so that the first
// thing a newcomer pastes cannot go stale. It has no code of its own.
package quickstart
