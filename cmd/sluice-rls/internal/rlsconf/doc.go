// Package rlsconf reads envoyproxy/ratelimit's configuration, unchanged:
// a directory of YAML files, each holding one domain and its tree of
// descriptors (key and optional value, a value ending in '*' matching
// every value with that prefix), some of them with a rate_limit (unit
// second, minute, hour, day, week, month or year, requests_per_unit, name,
// unlimited, replaces) and the flags shadow_mode, quota_mode,
// detailed_metric, value_to_metric and share_threshold.
//
// It accepts the files envoyproxy/ratelimit accepts and refuses those it
// refuses (an empty domain or key, a domain or a descriptor given twice,
// an unknown unit, a unit beside unlimited, an unknown key, a key that is
// not a string, a list of something else than mappings, a number that is
// not whole, replaces naming nothing or the rule itself, share_threshold
// on a value without a wildcard), but reports every problem of every
// file at once, each at its file:line:col (policyfile.Errors), where
// envoyproxy/ratelimit stops at the first, naming only the file. A key
// envoyproxy/ratelimit knows, written where it means nothing (unit beside
// key, say), is accepted as it accepts it, and reported as a warning.
//
// Three keys of rate_limit are sluice's own: algorithm (fixed_window, the
// default, as envoyproxy/ratelimit counts; gcra, token_bucket,
// sliding_window, sliding_log or concurrency), burst (for gcra and
// token_bucket; default requests_per_unit) and identity, which counts the
// descriptor's value as the identity an httplimit or grpclimit policy
// names (ip, api_key, subject, or {header: NAME}, {metadata: NAME}), so
// that a rule and an application policy of the same name share one quota.
//
// Lookup finds the rule of a request's descriptor as envoyproxy/ratelimit
// does (the most specific key and value first, then a wildcard value,
// then the key alone; the rule applies only to a descriptor exactly as
// deep as it is) and the name its statistics are kept under.
package rlsconf
