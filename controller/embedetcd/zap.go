package embedetcd

import (
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ZapLogger returns a zap logger that writes to log: etcd's server and
// client log through zap, replicator through hclog. Entries below log's
// level are dropped before they are formatted.
func ZapLogger(log hclog.Logger) *zap.Logger {
	return zap.New(&hclogCore{log: log, quiet: new(atomic.Bool)})
}

// hclogCore is a zapcore.Core over an hclog.Logger.
type hclogCore struct {
	log    hclog.Logger
	fields []zapcore.Field
	// quiet, once set (the member is closing), logs warnings and errors
	// at debug level: etcd reports its own listeners closing as failures.
	quiet *atomic.Bool
}

func toHclog(l zapcore.Level) hclog.Level {
	switch {
	case l <= zapcore.DebugLevel:
		return hclog.Debug
	case l == zapcore.InfoLevel:
		return hclog.Info
	case l == zapcore.WarnLevel:
		return hclog.Warn
	}
	return hclog.Error
}

func (c *hclogCore) level(l zapcore.Level) hclog.Level {
	if c.quiet.Load() {
		return hclog.Debug
	}
	return toHclog(l)
}

func (c *hclogCore) Enabled(l zapcore.Level) bool {
	lvl := c.log.GetLevel()
	return lvl != hclog.Off && c.level(l) >= lvl
}

func (c *hclogCore) With(fields []zapcore.Field) zapcore.Core {
	return &hclogCore{log: c.log, fields: append(slices.Clip(c.fields), fields...), quiet: c.quiet}
}

func (c *hclogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *hclogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fields {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	args := make([]any, 0, 2*len(keys)+2)
	if e.LoggerName != "" {
		args = append(args, "component", e.LoggerName)
	}
	for _, k := range keys {
		v := enc.Fields[k]
		switch v.(type) {
		case string, bool, int, int32, int64, uint, uint32, uint64, float64:
		default:
			v = fmt.Sprint(v)
		}
		args = append(args, k, v)
	}
	c.log.Log(c.level(e.Level), e.Message, args...)
	return nil
}

func (c *hclogCore) Sync() error { return nil }
