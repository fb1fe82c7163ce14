// Package buildinfo names the version of sortie a binary was built with,
// the same way for every build: `sortie version`, the process registry
// (and so the dashboard's processes page) and the API all say it so.
//
// A binary built from a release (go install ...@v0.4.0, or an application
// requiring that version) says its tag. A binary built from a checkout says
// "devel", followed by the commit when the build recorded one
// ("devel+7b1ae327cce8", "+dirty" with uncommitted changes): `sortie serve`
// from `go build`, `go run` or `make build`, and an application built with
// sortie replaced by that checkout, all say the same thing. Go leaves the
// commit out when VCS stamping is off (-buildvcs=false, or go run without
// -buildvcs=true); such a build says plain "devel".
package buildinfo

import (
	"runtime/debug"
	"strings"

	"golang.org/x/mod/module"
)

// modulePath is sortie's module.
const modulePath = "github.com/sortiehq/sortie"

// Version is the version of sortie this binary was built with, as the
// package doc says, or "devel" when the binary has no build information.
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	return Of(info)
}

// Of is Version for the build described by info.
func Of(info *debug.BuildInfo) string {
	mod, main := sortieModule(info)
	if mod == nil {
		return "devel"
	}
	v := mod.Version
	if mod.Replace != nil {
		v = mod.Replace.Version // "" when replaced by a directory
	}
	if release(v) {
		return v
	}
	rev, dirty := commit(info, v, main || (mod.Replace != nil && mod.Replace.Version == ""))
	if rev == "" {
		return "devel"
	}
	if dirty {
		return "devel+" + rev + "+dirty"
	}
	return "devel+" + rev
}

// sortieModule returns sortie's module in info, and whether it is the
// main module.
func sortieModule(info *debug.BuildInfo) (*debug.Module, bool) {
	if info.Main.Path == modulePath {
		return &info.Main, true
	}
	for _, d := range info.Deps {
		if d.Path == modulePath {
			return d, false
		}
	}
	return nil, false
}

// release reports whether v is a version a release names: a semantic
// version that is no pseudo-version (a commit without a tag) nor the
// placeholder an unpublished requirement has.
func release(v string) bool {
	v, _ = strings.CutSuffix(v, "+dirty")
	if v == "" || v == "(devel)" || module.IsPseudoVersion(v) || module.Check(modulePath, v) != nil {
		return false
	}
	return !strings.HasPrefix(v, "v0.0.0-")
}

// commit returns the commit (12 hex digits) of a build from a checkout
// and whether it had uncommitted changes: from the VCS stamp when
// checkout is true (the main module is sortie, or sortie was replaced by a
// directory of the same checkout), else from a pseudo-version.
func commit(info *debug.BuildInfo, v string, checkout bool) (string, bool) {
	if checkout {
		var rev string
		var dirty bool
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if rev != "" {
			return rev[:min(12, len(rev))], dirty
		}
	}
	base, dirty := strings.CutSuffix(v, "+dirty")
	if module.IsPseudoVersion(base) {
		if rev, err := module.PseudoVersionRev(base); err == nil && !strings.HasPrefix(base, "v0.0.0-00010101000000-") {
			return rev, dirty
		}
	}
	return "", false
}
