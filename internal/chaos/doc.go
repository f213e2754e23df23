// Package chaos holds the fault-injection suite: it breaks the relay's
// surroundings for real — SIGKILLs the relay process, takes brokers away,
// terminates database connections (PostgreSQL and MySQL), restarts PostgreSQL — and checks that
// every event still reaches the broker, none goes DEAD that could have been
// delivered, and duplicates stay within what the failure explains. It has
// only tests; `make chaos` runs it alone and `make test` runs it with the
// rest.
package chaos
