// Package outbox is the outbox's shared vocabulary: the Event the relay
// moves, the Status values of the state machine, the rules for turning a
// row's JSON headers into broker headers, and the Message producers write.
// It holds no database client and no SQL: each storage driver has its own
// producer helper (postgres.Write, mysql.Write) built on Prepare.
package outbox

import (
	"slices"
	"time"

	"github.com/google/uuid"
)

// Status is the state of one outbox row.
type Status string

// The four states of the outbox state machine. The values are stored in the
// status column as they are spelled here.
const (
	StatusPending    Status = "PENDING"
	StatusDelivering Status = "DELIVERING"
	StatusDelivered  Status = "DELIVERED"
	StatusDead       Status = "DEAD"
)

// Statuses lists every status in state-machine order.
var Statuses = []Status{StatusPending, StatusDelivering, StatusDelivered, StatusDead}

// Valid reports whether s is one of the four states.
func (s Status) Valid() bool { return slices.Contains(Statuses, s) }

// Event is one claimed outbox row, as much of it as publishing needs.
type Event struct {
	ID   uuid.UUID
	Type string
	// PartitionKey is empty when the row's partition_key is NULL.
	PartitionKey string
	Payload      []byte
	// Headers is the row's headers column as raw JSON; see ParseHeaders.
	Headers []byte
	// Attempts counts the publish attempts that failed before this claim.
	Attempts  int
	CreatedAt time.Time
}
