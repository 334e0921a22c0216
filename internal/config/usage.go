package config

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Usage prints the help text of the program (cmd nil) or of one command.
func (p *Program) Usage(w io.Writer, cmd *Command) {
	if cmd == nil {
		fmt.Fprintf(w, "%s - %s\n\n", p.Name, p.Synopsis)
		fmt.Fprintf(w, "Usage:\n  %s [global flags] COMMAND [flags] [ARGS]\n\nCommands:\n", p.Name)
		tw := tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)
		for _, c := range p.Commands {
			fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Synopsis)
		}
		tw.Flush()
		fmt.Fprintf(w, "\nGlobal flags (also accepted after the command):\n")
		p.printOptions(w, nil, p.Global)
		fmt.Fprintf(w, `
Every flag is also a configuration-file key and an environment variable:
  --segment-size 64MiB  =  master { segment_size = "64MiB" }  =  %sMASTER_SEGMENT_SIZE=64MiB
Global flags are top-level keys (log_level = "debug") and %sLOG_LEVEL. A flag wins
over the environment, which wins over the file (--config FILE or %sCONFIG).
Unknown keys and invalid values are refused at start.

Run '%s COMMAND --help' for a command's flags.
`, EnvPrefix, EnvPrefix, EnvPrefix, p.Name)
		return
	}
	args := ""
	if len(cmd.Options) > 0 {
		args = " [flags]"
	}
	if cmd.Args != "" {
		args += " " + cmd.Args
	}
	fmt.Fprintf(w, "Usage: %s [global flags] %s%s\n\n", p.Name, cmd.Name, args)
	if cmd.Help != "" {
		fmt.Fprintf(w, "%s\n\n", strings.TrimSpace(cmd.Help))
	} else {
		fmt.Fprintf(w, "%s.\n\n", upperFirst(cmd.Synopsis))
	}
	if len(cmd.Options) > 0 {
		fmt.Fprintf(w, "Flags:\n")
		p.printOptions(w, cmd, cmd.Options)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "Global flags: ")
	var g []string
	for _, o := range p.Global {
		g = append(g, "--"+o.Name+" "+o.Meta)
	}
	fmt.Fprintf(w, "%s (see '%s --help').\n", strings.Join(g, ", "), p.Name)
}

func (p *Program) printOptions(w io.Writer, cmd *Command, opts []*Option) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, o := range opts {
		flag := "--" + o.Name
		if o.Meta != "" {
			flag += " " + o.Meta
		}
		help := o.Help
		if o.Default != "" {
			help += " (default " + o.Default + ")"
		}
		if o.Required {
			help += " (required)"
		}
		fmt.Fprintf(tw, "  %s\t%s\n", flag, help)
		fmt.Fprintf(tw, "  \t[$%s]\n", EnvName(cmd, o))
	}
	tw.Flush()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
