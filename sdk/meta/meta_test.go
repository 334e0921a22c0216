package meta

import (
	"encoding/json"
	"testing"
	"time"
)

func TestDataVersionNextEqualCompare(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1764576000123)
	v := DataVersion{StateVersion: 2, Timestamp: 5, Counter: 7}
	n := v.Next(now)
	if n != (DataVersion{StateVersion: 2, Timestamp: 1764576000123, Counter: 8}) {
		t.Fatalf("Next = %+v", n)
	}
	if !n.Equal(n) || n.Equal(v) {
		t.Fatal("Equal wrong")
	}
	cases := []struct {
		a, b DataVersion
		want int
	}{
		{DataVersion{1, 0, 0}, DataVersion{0, 9, 9}, 1},
		{DataVersion{0, 0, 2}, DataVersion{0, 9, 1}, 1},
		{DataVersion{0, 1, 2}, DataVersion{0, 9, 2}, -1},
		{DataVersion{0, 9, 2}, DataVersion{0, 9, 2}, 0},
	}
	for _, c := range cases {
		if got := c.a.Compare(c.b); got != c.want {
			t.Errorf("%+v.Compare(%+v) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
	data, _ := json.Marshal(n)
	if string(data) != `{"stateVersion":2,"timestamp":1764576000123,"counter":8}` {
		t.Fatalf("JSON = %s", data)
	}
}
