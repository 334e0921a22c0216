package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the quick start and checks what it prints.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), t.TempDir(), &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	got := out.String()
	for _, want := range []string{
		"slave connected",
		`put "hello"    PUT_OK offset=0`,
		`put "from"     PUT_OK`,
		`put "replicator" PUT_OK`,
		`slave has offset=0 topic=TopicTest body="hello"`,
		`body="from"`,
		`body="replicator"`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}
