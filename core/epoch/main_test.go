package epoch

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The crash test re-executes this binary as the writer it kills.
	if dir := os.Getenv(crashChildEnv); dir != "" {
		os.Exit(crashChild(dir, os.Getenv(crashSeedEnv), os.Getenv(crashStepEnv)))
	}
	goleak.VerifyTestMain(m)
}
