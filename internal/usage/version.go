package usage

import (
	"runtime/debug"
	"strings"
)

// ModulePath is this module's path: a binary of another module (a projector
// of a user's, built on projections/projectorcmd) names the version of this
// module it was built with beside its own.
const ModulePath = "github.com/alineo-labs/alineo"

// Version is the line --version prints for the command name: the main
// module's path and version, its VCS revision, commit time and whether the
// tree was modified (as the go command stamps them into the binary), this
// module's version when it is a dependency, and the Go version. Unknown parts
// are left out.
func Version(name string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)"
	}
	return versionOf(name, bi)
}

func versionOf(name string, bi *debug.BuildInfo) string {
	var b strings.Builder
	b.WriteString(name)
	if bi.Main.Path != "" {
		b.WriteString(" " + bi.Main.Path)
	}
	b.WriteString(" " + cmpOr(bi.Main.Version, "(devel)"))
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" {
		b.WriteString(" revision " + rev)
		if at != "" {
			b.WriteString(" (" + at + ")")
		}
		if modified {
			b.WriteString(" modified")
		}
	}
	if bi.Main.Path != ModulePath {
		for _, d := range bi.Deps {
			if d.Path != ModulePath {
				continue
			}
			b.WriteString(", " + ModulePath + " " + cmpOr(d.Version, "(devel)"))
			if d.Replace != nil {
				b.WriteString(" => " + d.Replace.Path)
				if d.Replace.Version != "" {
					b.WriteString(" " + d.Replace.Version)
				}
			}
		}
	}
	if bi.GoVersion != "" {
		b.WriteString(", " + bi.GoVersion)
	}
	return b.String()
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
