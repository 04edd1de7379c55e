// Package reload keeps the configuration read from a file in force while
// a program runs, without a restart: Watch loads the file, hands the
// result to an apply function (httplimit's Middleware.Update, grpclimit's
// Server.Update), and does so again each time the file changes, or when
// Watcher.Reload is called (on SIGHUP, say).
//
// A new version that cannot be read, loaded or applied is refused: the
// last good version keeps serving, the error is logged and counted, and
// Watcher.Status reports it for a health endpoint. A file whose bytes are
// those of the version in force is not applied again.
//
// The file's directory is watched, not the file, so each way a file is
// replaced is seen: written in place, a temporary file renamed over it
// (most editors, atomic writers), deleted and created again, or a symbolic
// link swapped to point elsewhere (a Kubernetes ConfigMap volume swaps its
// ..data link). The directory the file really lies in, when a link leads
// elsewhere, is watched too.
//
// WatchDir does the same for a configuration made of the files of a
// directory (envoyproxy/ratelimit's directory of YAML files, say): a
// version is what the files it selects hold, and any change in the
// directory is looked at.
package reload
