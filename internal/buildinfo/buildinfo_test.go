package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestOf(t *testing.T) {
	t.Parallel()
	vcs := func(rev string, dirty bool) []debug.BuildSetting {
		d := "false"
		if dirty {
			d = "true"
		}
		return []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: d}}
	}
	const rev = "7b1ae327cce8faa2053746deddbaa97639f22052"
	app := func(v string, replace *debug.Module, settings []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"},
			Deps: []*debug.Module{{Path: modulePath, Version: v, Replace: replace}}, Settings: settings}
	}
	for _, tt := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"go install of a release", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.4.0"}}, "v0.4.0"},
		{"go build from a checkout, stamped", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.0.0-20261125133749-7b1ae327cce8"},
			Settings: vcs(rev, false)}, "devel+7b1ae327cce8"},
		{"go build from a checkout with changes", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v0.0.0-20261125133749-7b1ae327cce8+dirty"},
			Settings: vcs(rev, true)}, "devel+7b1ae327cce8+dirty"},
		{"go run with -buildvcs=true", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}, Settings: vcs(rev, false)}, "devel+7b1ae327cce8"},
		{"a build without VCS stamping", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "devel"},
		{"an application requiring a release", app("v0.4.0", nil, nil), "v0.4.0"},
		{"an application requiring a commit", app("v0.4.1-0.20261125133749-7b1ae327cce8", nil, nil), "devel+7b1ae327cce8"},
		{"an application with sortie replaced by the checkout", app("v0.0.0-00010101000000-000000000000",
			&debug.Module{Path: "../sortie"}, vcs(rev, false)), "devel+7b1ae327cce8"},
		{"the same, unstamped", app("v0.0.0-00010101000000-000000000000", &debug.Module{Path: "../sortie"}, nil), "devel"},
		{"an application with sortie replaced by a fork's release", app("v0.4.0",
			&debug.Module{Path: "example.com/fork", Version: "v0.4.2"}, vcs(rev, false)), "v0.4.2"},
		{"no sortie at all", &debug.BuildInfo{Main: debug.Module{Path: "example.com/other"}}, "devel"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := Of(tt.info); got != tt.want {
				t.Errorf("Of() = %q, want %q", got, tt.want)
			}
		})
	}
}
