package config

import (
	"strings"
	"testing"
)

// TestBoolErrorNamesEveryAcceptedForm: the parser accepts yes/no and on/off
// as well as true/false and 1/0, and its error says so.
func TestBoolErrorNamesEveryAcceptedForm(t *testing.T) {
	var b bool
	v := Bool(&b)
	for in, want := range map[string]bool{"yes": true, "ON": true, "1": true, "no": false, "off": false, "False": false} {
		if err := v.Set(in); err != nil || b != want {
			t.Errorf("Set(%q) = %v, %v", in, b, err)
		}
	}
	err := v.Set("maybe")
	if err == nil {
		t.Fatal("maybe accepted")
	}
	for _, w := range []string{"true", "false", "yes", "no", "on", "off", "1", "0"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
}
