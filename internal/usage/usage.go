package usage

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Error is a command-line mistake: an unknown flag, subcommand or a wrong
// number of arguments. Usage is the text printed after it.
type Error struct {
	Err   error
	Usage string
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with usage text u.
func Errorf(u, format string, args ...any) error {
	return &Error{Err: fmt.Errorf(format, args...), Usage: u}
}

// Text returns head followed by fs's flags, as -h prints them.
func Text(fs *flag.FlagSet, head string) string {
	var b strings.Builder
	b.WriteString(strings.TrimRight(head, "\n"))
	b.WriteString("\n")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n > 0 {
		b.WriteString("\nflags:\n")
		out := fs.Output()
		fs.SetOutput(&b)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
	return b.String()
}

// versionFlag is the flag every FlagSet parsed by Parse gets.
const versionFlag = "version"

// Parse parses args into fs, flags before or after the arguments ("show
// NAME ID -o json" as well as "show -o json NAME ID"); after "--" everything
// is an argument. Afterwards fs.Args() holds the arguments, in order.
//
// On -h or --help it prints Text(fs, head) to stdout and returns
// flag.ErrHelp; on --version (a flag Parse adds to fs unless fs has one) it
// prints Version of the command (fs's name up to its first space) and returns
// flag.ErrHelp; a bad flag returns an *Error carrying Text(fs, head). fs's
// own output is discarded.
func Parse(fs *flag.FlagSet, args []string, head string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	var version *bool
	if fs.Lookup(versionFlag) == nil {
		version = fs.Bool(versionFlag, false, "print the version (module and VCS revision) and exit")
	}
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprint(stdout, Text(fs, head))
			return flag.ErrHelp
		case err != nil:
			return &Error{Err: err, Usage: Text(fs, head)}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if version != nil && *version {
		name, _, _ := strings.Cut(fs.Name(), " ")
		fmt.Fprintln(stdout, Version(name))
		return flag.ErrHelp
	}
	// Parse once more, only the arguments, so that fs.Args() returns them;
	// the flags keep the values set above.
	return fs.Parse(append([]string{"--"}, pos...))
}

// Command returns the command line's subcommand, the first argument of args
// that is neither a flag nor a flag's value, and args without it, so that
// flags may come before the subcommand ("alineo --url U sandboxes"). A
// flag's value is told apart by looking the flag up in sets: a flag found in
// none of them, a boolean one or one written -flag=value takes no separate
// value. After "--" the next argument is the subcommand. It returns "" and
// args when there is none.
func Command(args []string, sets ...*flag.FlagSet) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			if i+1 < len(args) {
				return args[i+1], append(slices.Clone(args[:i]), args[i+2:]...)
			}
			return "", args
		case len(a) < 2 || a[0] != '-':
			return a, append(slices.Clone(args[:i]), args[i+1:]...)
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue(name, sets) {
			i++
		}
	}
	return "", args
}

// takesValue reports whether the flag name of one of sets takes a separate
// value (is not boolean).
func takesValue(name string, sets []*flag.FlagSet) bool {
	for _, fs := range sets {
		if f := fs.Lookup(name); f != nil {
			b, ok := f.Value.(interface{ IsBoolFlag() bool })
			return !ok || !b.IsBoolFlag()
		}
	}
	return false
}

// IsHelp reports whether arg asks for the help: -h, -help, --help or help.
func IsHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// IsVersion reports whether arg asks for the version: -version, --version
// or version.
func IsVersion(arg string) bool {
	switch arg {
	case "-version", "--version", "version":
		return true
	}
	return false
}

// PrintVersion prints Version(name) to stdout and returns flag.ErrHelp (exit
// 0): the answer to a "version" subcommand or a --version before one.
func PrintVersion(stdout io.Writer, name string) error {
	fmt.Fprintln(stdout, Version(name))
	return flag.ErrHelp
}

// Help prints text to stdout and returns flag.ErrHelp: the answer to a
// "help" subcommand or a bare -h before one.
func Help(stdout io.Writer, text string) error {
	fmt.Fprintln(stdout, strings.TrimRight(text, "\n"))
	return flag.ErrHelp
}

// Code is the exit code of err: 0 for nil and flag.ErrHelp, 2 for an
// *Error, 1 otherwise.
func Code(err error) int {
	var ue *Error
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		return 2
	}
	return 1
}

// Exit reports err on stderr as "name: err" (with the usage after a usage
// error) and exits with Code(err). It returns only when the code is 0.
func Exit(name string, err error) {
	code := Code(err)
	if code == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	var ue *Error
	if errors.As(err, &ue) && ue.Usage != "" {
		fmt.Fprintf(os.Stderr, "\n%s", strings.TrimRight(ue.Usage, "\n")+"\n")
	}
	os.Exit(code)
}
