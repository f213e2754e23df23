package postgres

import "testing"

func TestKeptReasonNamesEachStatusAndCapsItsCount(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		keeps [4]int64
		want  string
	}{
		{[4]int64{3, 0, 0, 0}, "holds 3 PENDING row(s) unfinished or not past retention"},
		{[4]int64{0, 1, keepCountCap, 2}, "holds 1 DELIVERING, 10000+ DELIVERED, 2 DEAD row(s) unfinished or not past retention"},
	} {
		if got := keptReason(tt.keeps); got != tt.want {
			t.Errorf("keptReason(%v) = %q, want %q", tt.keeps, got, tt.want)
		}
	}
}
