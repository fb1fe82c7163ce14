package cli

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/sortiehq/sortie/internal/buildinfo"
)

const versionDescription = `
Version prints the version of this sortie binary, as the processes page
and the API show it: a tag such as v0.4.0 when it was installed with go
install ...@VERSION, "devel+COMMIT" when built from a clone ("+dirty" with
uncommitted changes; plain "devel" when the build recorded no commit), then
the commit in full, when it was committed, and the Go version that built it.`

func runVersion(_ context.Context, e *env, args []string) int {
	fs := flagSet("version", "", versionDescription)
	if code := parseFlags(e, fs, args); code >= 0 {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		fmt.Fprintln(e.stdout, "sortie: no build information in this binary")
		return exitOK
	}
	printVersion(e.stdout, info)
	return exitOK
}

// printVersion writes what info says of the build.
func printVersion(w io.Writer, info *debug.BuildInfo) {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	fmt.Fprintf(w, "sortie %s\n", buildinfo.Of(info))
	if rev := settings["vcs.revision"]; rev != "" {
		dirty := ""
		if settings["vcs.modified"] == "true" {
			dirty = " (with uncommitted changes)"
		}
		fmt.Fprintf(w, "commit %s%s\n", rev, dirty)
		if t := settings["vcs.time"]; t != "" {
			fmt.Fprintf(w, "committed %s\n", t)
		}
	}
	fmt.Fprintf(w, "built with %s %s/%s\n", info.GoVersion, settings["GOOS"], settings["GOARCH"])
}
