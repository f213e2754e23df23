package postgres

import "testing"

// A held claim cut by its byte limit makes the next lock twice what fit;
// a batch that fills its count without a cut doubles the cap back.
func TestHeldLimitFollowsWhatFits(t *testing.T) {
	var h heldLimit
	steps := []struct {
		taken, cut int // what the claim that got the limit did
		want       int // the next claim's limit, of 500
	}{
		{taken: 500, want: 500}, // nothing cut: no cap
		{taken: 9, cut: 491, want: 18},
		{taken: 9, cut: 9, want: 18}, // steady: as many locked in vain as taken
		{taken: 1, cut: 17, want: 2}, // an event larger than the limit goes alone
		{taken: 2, want: 4},          // the count filled without a cut
		{taken: 3, want: 4},          // short: no more were there
		{taken: 4, want: 8},
		{taken: 8, want: 16},
	}
	limit := h.rows(500)
	for i, st := range steps {
		h.claimed(limit, st.taken, st.cut)
		limit = h.rows(500)
		if limit != st.want {
			t.Fatalf("step %d (took %d, cut %d): next limit %d, want %d", i, st.taken, st.cut, limit, st.want)
		}
	}
	for range 10 {
		h.claimed(limit, limit, 0)
		limit = h.rows(500)
	}
	if limit != 500 {
		t.Fatalf("after full batches the limit is %d, want BATCH_SIZE (500)", limit)
	}
}
