package usage

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
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

// Parse parses args into fs. On -h or --help it prints Text(fs, head) to
// stdout and returns flag.ErrHelp; a bad flag returns an *Error carrying that
// text. fs's own output is discarded.
func Parse(fs *flag.FlagSet, args []string, head string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, Text(fs, head))
		return flag.ErrHelp
	}
	return &Error{Err: err, Usage: Text(fs, head)}
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
