package scripts_test

import (
	"slices"
	"testing"
)

// The step tables: every point of the shared contract, for every script, at
// fixed instants. Each table runs unchanged on every backend (see
// TestStepTables). Times are µs after base; replies are
// {allowed, remaining, retry_after, reset_after[, limiting]}.

var tables = []table{
	{
		name:   "fixed_window",
		script: "fixed_window",
		params: []string{"3", "1000000"}, // 3 per 1 s window
		steps: []step{
			rate(0, 1, 1, 2, 0, 1*sec),                 // fresh: allowed, TTL 1000 ms
			rate(100*ms, 0, 1, 2, 0, 900*ms),           // cost 0 peeks, writes nothing
			rate(100*ms, 2, 1, 0, 0, 900*ms),           // weighted
			rate(250*ms, 1, 0, 0, 750*ms, 750*ms),      // denied until the next window
			rate(250*ms, 4, 0, 0, -1, 750*ms),          // cost > limit never fits
			rate(999_999, 1, 0, 0, 1, 1),               // 1 µs before the window ends
			rate(1*sec, 1, 1, 2, 0, 1*sec),             // next window: count starts over
			persist(rate(1500*ms, 0, 1, 2, 0, 500*ms)), // key without TTL: repaired by a peek
			rate(1_999_999, 3, 0, 2, 1, 1),             // weighted denial, 1 µs to go
			rate(5*sec, 3, 1, 0, 0, 1*sec),             // idle past the TTL: empty
			rate(5_000_123, 0, 1, 0, 0, 999_877),
			rate(7_654_321, 1, 1, 2, 0, 345_679),                // TTL 345.679 ms rounds up to 346 ms
			persist(rate(7_654_321, 3, 0, 2, 345_679, 345_679)), // a denial repairs the TTL too
			rate(8_999_979, 1, 1, 2, 0, 21),                     // 21 µs of life: TTL 2 ms, never 1 ms
		},
	},
	{
		name:   "sliding_log",
		script: "sliding_log",
		params: []string{"3", "1000000"}, // 3 per sliding 1 s
		steps: []step{
			rate(0, 1, 1, 2, 0, 1*sec),
			withMembers(rate(0, 1, 1, 1, 0, 1*sec), // same timestamp: a second, distinct member
				logged(0, 1, 1, 1*sec), logged(0, 2, 1, 1*sec)),
			rate(400*ms, 0, 1, 1, 0, 600*ms),
			rate(400*ms, 1, 1, 0, 0, 1*sec),
			rate(500*ms, 2, 0, 0, 500*ms, 900*ms), // both units at 0 must leave
			rate(500*ms, 4, 0, 0, -1, 900*ms),
			rate(999_999, 1, 0, 0, 1, 400_001),
			withMembers(rate(1*sec, 2, 1, 0, 0, 1*sec), // the units at 0 are out; trimmed on write
				logged(400*ms, 3, 1, 1*sec), logged(1*sec, 5, 2, 1*sec)),
			rate(1*sec, 1, 0, 0, 400*ms, 1*sec),
			persist(rate(1200*ms, 0, 1, 0, 0, 800*ms)),
			rate(1400*ms, 1, 1, 0, 0, 1*sec),
			rate(9*sec, 3, 1, 0, 0, 1*sec), // idle past the TTL: the running total restarts
			withMembers(rate(9*sec, 0, 1, 0, 0, 1*sec),
				logged(9*sec, 3, 3, 1*sec)),
			rate(9_123_457, 1, 0, 0, 876_543, 876_543),
		},
	},
	{
		// Weighted requests: retry_after is the time until the request
		// whose leaving makes room leaves the window, found by binary
		// search over the log.
		name:   "sliding_log_weighted",
		script: "sliding_log",
		params: []string{"10", "1000000"}, // 10 per sliding 1 s
		steps: []step{
			rate(0, 2, 1, 8, 0, 1*sec),
			rate(100*ms, 3, 1, 5, 0, 1*sec),
			rate(200*ms, 1, 1, 4, 0, 1*sec),
			withMembers(rate(300*ms, 4, 1, 0, 0, 1*sec),
				logged(0, 2, 2, 1*sec), logged(100*ms, 5, 3, 1*sec), logged(200*ms, 6, 1, 1*sec), logged(300*ms, 10, 4, 1*sec)),
			rate(400*ms, 1, 0, 0, 600*ms, 900*ms),  // the request at 0 must leave
			rate(400*ms, 3, 0, 0, 700*ms, 900*ms),  // 3 units: the one at 100 ms too
			rate(400*ms, 5, 0, 0, 700*ms, 900*ms),  // 5 units: exactly those two
			rate(400*ms, 6, 0, 0, 800*ms, 900*ms),  // 6: the one at 200 ms too
			rate(400*ms, 7, 0, 0, 900*ms, 900*ms),  // 7: all four
			rate(400*ms, 10, 0, 0, 900*ms, 900*ms), // 10: all four
			rate(400*ms, 11, 0, 0, -1, 900*ms),
			rate(1050*ms, 3, 0, 2, 50*ms, 250*ms), // the request at 0 is out: 8 counted
			withMembers(rate(1100*ms, 3, 1, 2, 0, 1*sec), // trimmed: the totals go on
				logged(200*ms, 6, 1, 1*sec), logged(300*ms, 10, 4, 1*sec), logged(1100*ms, 13, 3, 1*sec)),
			rate(1100*ms, 5, 0, 2, 200*ms, 1*sec), // 3 units must leave: those at 200 and 300 ms
			rate(1100*ms, 9, 0, 2, 1*sec, 1*sec),  // 7 units: all three
		},
	},
	{
		name:   "sliding_window",
		script: "sliding_window",
		params: []string{"4", "1000000"}, // 4 per 1 s, previous window weighted
		steps: []step{
			rate(0, 1, 1, 3, 0, 2*sec), // TTL: until this window's count leaves the next window
			rate(500*ms, 3, 1, 0, 0, 1500*ms),
			rate(600*ms, 1, 0, 0, 650*ms, 1400*ms), // next window, once 4*(1-e)+1 <= 4
			rate(600*ms, 5, 0, 0, -1, 1400*ms),
			rate(600*ms, 0, 1, 0, 0, 1400*ms),
			rate(1250*ms, 1, 1, 0, 0, 1750*ms),      // 4*0.75 + 0 + 1 = 4
			rate(1500*ms, 2, 0, 1, 250*ms, 1500*ms), // within this window, as prev's weight falls
			rate(1750*ms, 2, 1, 0, 0, 1250*ms),
			persist(rate(2100*ms, 0, 1, 1, 0, 900*ms)), // only the previous count is left
			rate(2100*ms, 2, 0, 1, 233_334, 900*ms),    // 3*666_666/1e6 + 2 <= 4 first at e = 333_334
			rate(9*sec, 4, 1, 0, 0, 2*sec),             // idle past the TTL
			rate(9_999_999, 1, 0, 0, 250_001, 1_000_001),
			rate(9_999_999, 4, 0, 0, 1_000_001, 1_000_001), // needs both windows gone
			rate(10*sec, 4, 0, 0, 1*sec, 1*sec),
		},
	},
	{
		name:   "token_bucket",
		script: "token_bucket",
		params: []string{"3", "1000000", "5"}, // 3 per s, capacity 5: T = 333_333.33 µs
		steps:  bucketSteps,
	},
	{
		name:   "gcra",
		script: "gcra",
		params: []string{"3", "1000000", "5"}, // the same steps as the token bucket
		steps:  bucketSteps,
	},
	{
		name:   "concurrency",
		script: "concurrency_acquire",
		params: []string{"2", "1000000"}, // 2 holders, 1 s leases
		steps: []step{
			acquire(0, "a", 1, 1, 0, 1*sec),
			acquire(100*ms, "b", 1, 0, 0, 1*sec),
			acquire(200*ms, "c", 0, 0, 800*ms, 900*ms), // until a's lease expires
			acquire(300*ms, "a", 1, 0, 0, 1*sec),       // a renews: no second slot
			acquire(300*ms, "c", 0, 0, 800*ms, 1*sec),  // now b's lease expires first
			release(400*ms, "b", 1, 1, 900*ms),
			release(400*ms, "b", 0, 1, 900*ms), // twice: harmless, writes nothing
			acquire(500*ms, "c", 1, 0, 0, 1*sec),
			acquire(600*ms, "d", 0, 0, 700*ms, 900*ms),
			withMembers(acquire(1300*ms, "d", 1, 0, 0, 1*sec), "c", "d"), // a's lease expired: its slot is back
			release(1300*ms, "a", 0, 2, 1*sec),
			persist(acquire(1400*ms, "e", 0, 0, 100*ms, 900*ms)),
			acquire(1500*ms, "e", 1, 0, 0, 1*sec),
			{at: 10 * sec, id: "e", script: "concurrency_release", want: []int64{0, 0, 0}, write: 2}, // expired: nothing to give back
			acquire(10*sec, "f", 1, 1, 0, 1*sec),
		},
	},
	{
		// Each limit has its own key, holding what gcra keeps:
		// "tat:r:l:p".
		name:   "gcra_multi",
		script: "gcra_multi",
		limits: [][]string{{"2", "1000000", "2"}, {"3", "10000000", "3"}}, // 2 per s (burst 2) AND 3 per 10 s (burst 3)
		steps: []step{
			withValues(withLives(rate(0, 1, 1, 1, 0, 3_333_334, 1), 500*ms, 3_333_334), func(start int64) []string {
				// T = 500 ms, and 10 s/3 = 3,333,333 µs + 1/3 µs; each with
				// its rate in lowest terms (1 per 500,000 µs, 3 per 10 s).
				return []string{itoa(start+500*ms) + ":0:1:500000", itoa(start+3_333_333) + ":1:3:10000000"}
			}),
			withLives(rate(0, 1, 1, 0, 0, 6_666_667, 1), 1*sec, 6_666_667),
			rate(0, 1, 0, 0, 500*ms, 6_666_667, 1),                                                // the 2/s limit decides
			withLives(rate(500*ms, 1, 1, 0, 0, 9_500_000, 1), 1*sec, 9_500_000),                   // TAT of 3/10 s carries a whole µs
			rate(1*sec, 1, 0, 0, 2_333_334, 9*sec, 2),                                             // now the 3/10 s limit decides
			rate(1*sec, 4, 0, 0, -1, 9*sec, 1),                                                    // cost above the first burst
			rate(1*sec, 0, 1, 0, 0, 9*sec, 2),                                                     // a peek names the tightest limit
			persist(using(rate(1*sec, 1, 0, 0, 2_333_334, 9*sec, 1), []int{2, 1}, 9*sec, 500*ms)), // reordered: same states; each key's TTL repaired
			using(rate(1*sec, 1, 0, 0, 2_333_334, 9*sec, 1), []int{2}),                            // one limit alone
			withLives(rate(3_333_334, 1, 1, 0, 0, 10*sec, 2), 500*ms, 10*sec),                     // each key lives as long as its own TAT
		},
	},
	{
		// gcra on one limit's key and gcra_multi on all, in either order,
		// spend one quota.
		name:   "gcra_multi_shared",
		script: "gcra_multi",
		limits: [][]string{{"2", "1000000", "2"}, {"1", "100000000", "1"}}, // 2 per s AND 1 per 100 s
		steps: []step{
			using(step{at: 0, cost: 1, script: "gcra", want: []int64{1, 1, 0, 500 * ms}}, []int{1}),
			withLives(rate(0, 1, 1, 0, 0, 100*sec, 1), 1*sec, 100*sec),
			using(rate(0, 1, 0, 0, 100*sec, 100*sec, 1), []int{2, 1}), // 1 per 100 s decides, first in this call
			using(step{at: 500 * ms, cost: 1, script: "gcra", want: []int64{1, 0, 0, 1 * sec}}, []int{1}),
			using(step{at: 500 * ms, cost: 0, script: "gcra", want: []int64{1, 0, 0, 99_500 * ms}}, []int{2}),
			rate(1*sec, 1, 0, 0, 99*sec, 99*sec, 2),
		},
	},
	{
		// Each limit has its own key, holding what sliding_window keeps:
		// "t:c:p:d".
		name:   "sliding_window_multi",
		script: "sliding_window_multi",
		limits: [][]string{{"2", "1000000"}, {"3", "10000000"}}, // 2 per s AND 3 per 10 s
		steps: []step{
			withValues(withLives(rate(0, 1, 1, 1, 0, 20*sec, 1), 2*sec, 20*sec), func(start int64) []string {
				return []string{itoa(start) + ":1:0:1000000", itoa(start) + ":1:0:10000000"}
			}),
			withLives(rate(500*ms, 1, 1, 0, 0, 19_500_000, 1), 1500*ms, 19_500_000),
			rate(1200*ms, 1, 0, 0, 300*ms, 18_800_000, 1),
			withLives(rate(1500*ms, 1, 1, 0, 0, 18_500_000, 1), 1500*ms, 18_500_000),
			rate(2*sec, 1, 0, 0, 11_333_334, 18*sec, 2),
			rate(2*sec, 3, 0, 0, -1, 18*sec, 1),
			persist(using(rate(2*sec, 1, 0, 0, 11_333_334, 18*sec, 1), []int{2, 1}, 18*sec, 1*sec)),
			withLives(rate(13_333_334, 1, 1, 0, 0, 16_666_666, 2), 1_666_666, 16_666_666),
			rate(13_333_334, 0, 1, 0, 0, 16_666_666, 2), // a peek
		},
	},
	{
		// sliding_window on one limit's key and sliding_window_multi on
		// all, in either order, spend one quota.
		name:   "sliding_window_multi_shared",
		script: "sliding_window_multi",
		limits: [][]string{{"2", "1000000"}, {"1", "100000000"}}, // 2 per s AND 1 per 100 s
		steps: []step{
			using(step{at: 0, cost: 1, script: "sliding_window", want: []int64{1, 1, 0, 2 * sec}}, []int{1}),
			withLives(rate(0, 1, 1, 0, 0, 200*sec, 1), 2*sec, 200*sec),
			using(rate(500*ms, 1, 0, 0, 199_500*ms, 199_500*ms, 1), []int{2, 1}),
			using(step{at: 2 * sec, cost: 2, script: "sliding_window", want: []int64{1, 0, 0, 2 * sec}}, []int{1}),
			rate(2*sec, 0, 1, 0, 0, 198*sec, 1),
		},
	},
	{
		// Each limit has its own key, holding what fixed_window keeps:
		// "t:n:p".
		name:   "fixed_window_multi",
		script: "fixed_window_multi",
		limits: [][]string{{"2", "1000000"}, {"3", "10000000"}}, // 2 per 1 s window AND 3 per 10 s window
		steps: []step{
			withValues(withLives(rate(0, 1, 1, 1, 0, 10*sec, 1), 1*sec, 10*sec), func(start int64) []string {
				return []string{itoa(start) + ":1:1000000", itoa(start) + ":1:10000000"}
			}),
			withValues(withLives(rate(500*ms, 1, 1, 0, 0, 9500*ms, 1), 500*ms, 9500*ms), func(start int64) []string {
				return []string{itoa(start+500*ms) + ":2:1000000", itoa(start+500*ms) + ":2:10000000"}
			}),
			rate(600*ms, 1, 0, 0, 400*ms, 9400*ms, 1),                                                 // the 1 s window is full: until it ends
			withLives(rate(1*sec, 1, 1, 0, 0, 9*sec, 2), 1*sec, 9*sec),                                // a new 1 s window; the 10 s one now full
			rate(1200*ms, 1, 0, 0, 8800*ms, 8800*ms, 2),                                               // the 10 s limit decides
			rate(1200*ms, 3, 0, 0, -1, 8800*ms, 1),                                                    // cost above the first limit
			persist(using(rate(1200*ms, 1, 0, 0, 8800*ms, 8800*ms, 1), []int{2, 1}, 8800*ms, 800*ms)), // reordered: same states; each key's TTL repaired
			// The second limit's period becomes 20 s: its count stands
			// only until its own 10 s window ends, then an admission
			// writes into the 20 s window holding now.
			withLimits(rate(1500*ms, 1, 0, 0, 8500*ms, 8500*ms, 2), []string{"2", "1000000"}, []string{"3", "20000000"}),
			withValues(withLimits(withLives(rate(10*sec, 1, 1, 1, 0, 10*sec, 1), 1*sec, 10*sec), []string{"2", "1000000"}, []string{"3", "20000000"}), func(start int64) []string {
				return []string{itoa(start+10*sec) + ":1:1000000", itoa(start+10*sec) + ":1:20000000"}
			}),
			withLimits(rate(10500*ms, 0, 1, 1, 0, 9500*ms, 1), []string{"2", "1000000"}, []string{"3", "20000000"}), // a peek
		},
	},
	{
		// fixed_window on one limit's key and fixed_window_multi on all,
		// in either order, spend one quota.
		name:   "fixed_window_multi_shared",
		script: "fixed_window_multi",
		limits: [][]string{{"2", "1000000"}, {"1", "100000000"}}, // 2 per 1 s window AND 1 per 100 s window
		steps: []step{
			using(step{at: 0, cost: 1, script: "fixed_window", want: []int64{1, 1, 0, 1 * sec}}, []int{1}),
			withLives(rate(0, 1, 1, 0, 0, 100*sec, 1), 1*sec, 100*sec),
			using(rate(500*ms, 1, 0, 0, 99_500*ms, 99_500*ms, 1), []int{2, 1}),
			using(step{at: 2 * sec, cost: 2, script: "fixed_window", want: []int64{1, 0, 0, 1 * sec}}, []int{1}),
			rate(2*sec, 0, 1, 0, 0, 98*sec, 1),
		},
	},
}

// skewTables replay a client whose clock is behind the state another
// client wrote: no script may admit more than its limit because of it.
// Window scripts count the request in the later window; the token bucket
// does not refill before the time it last saw; GCRA reads the state as it
// stands at the earlier clock, which is stricter.
var skewTables = []table{
	{
		name: "fixed_window_skew", script: "fixed_window", params: []string{"3", "1000000"},
		steps: []step{
			rate(1200*ms, 2, 1, 1, 0, 800*ms),
			rate(900*ms, 1, 1, 0, 0, 1100*ms), // counted in the window of 1 s
			rate(900*ms, 1, 0, 0, 1100*ms, 1100*ms),
		},
	},
	{
		// The log keeps its members in time order: a request from a clock
		// behind the newest member is logged at that member's time, which
		// only keeps it in the window longer.
		name: "sliding_log_skew", script: "sliding_log", params: []string{"2", "1000000"},
		steps: []step{
			rate(1*sec, 1, 1, 1, 0, 1*sec),
			withMembers(rate(600*ms, 1, 1, 0, 0, 1400*ms), // the unit at 1 s still counts
				logged(1*sec, 1, 1, 1*sec), logged(1*sec, 2, 1, 1*sec)),
			rate(600*ms, 1, 0, 0, 1400*ms, 1400*ms),
		},
	},
	{
		name: "sliding_window_skew", script: "sliding_window", params: []string{"4", "1000000"},
		steps: []step{
			rate(1500*ms, 2, 1, 2, 0, 1500*ms),
			rate(700*ms, 1, 1, 1, 0, 2300*ms), // decided as at 1 s, the start of the stored window
			rate(700*ms, 2, 0, 1, 1_633_334, 2300*ms),
		},
	},
	{
		name: "token_bucket_skew", script: "token_bucket", params: []string{"3", "1000000", "5"},
		steps: []step{
			rate(1*sec, 4, 1, 1, 0, 1_333_334),
			rate(500*ms, 1, 1, 0, 0, 2_166_667), // no refill before 1 s
			rate(500*ms, 1, 0, 0, 833_334, 2_166_667),
		},
	},
	{
		name: "gcra_skew", script: "gcra", params: []string{"3", "1000000", "5"},
		steps: []step{
			rate(1*sec, 4, 1, 1, 0, 1_333_334),
			rate(500*ms, 1, 0, 0, 500*ms, 1_833_334), // TAT - now is 5.5 intervals: over the burst
		},
	},
	{
		// A limit changed between calls (see bucketChangeSteps).
		name: "gcra_changed", script: "gcra", params: []string{"3", "1000000", "5"},
		steps: bucketChangeSteps,
	},
	{
		name: "token_bucket_changed", script: "token_bucket", params: []string{"3", "1000000", "5"},
		steps: bucketChangeSteps,
	},
}

// bucketChangeSteps change the numbers of a token bucket or GCRA of 3 per s
// and a burst of 5 between calls, on one state: both must give exactly
// these replies. The tokens missing carry over; they refill at the rate
// they were taken at until the next admission, which writes them, rounded
// up to whole tokens, under the new rate.
var bucketChangeSteps = []step{
	rate(0, 2, 1, 3, 0, 666_667),
	withParams(rate(0, 0, 1, 0, 0, 666_667), "3", "1000000", "2"),          // burst 2: the 2 missing leave none
	withParams(rate(0, 1, 0, 0, 333_334, 666_667), "3", "1000000", "2"),    // until one refills at 3 per s
	withParams(rate(0, 1, 1, 2, 0, 3*sec), "1", "1000000", "5"),            // 1 per s: 2 + 1 missing, refilled at 1 per s
	withParams(rate(500*ms, 0, 1, 7, 0, 2500*ms), "1", "1000000", "10"),    // burst 10: 10 - 2.5 at once
	withParams(rate(500*ms, 1, 1, 1, 0, 400*ms), "10", "1000000", "5"),     // 10 per s: ceil(2.5) + 1 missing, refilled at 10 per s
	withParams(rate(500*ms, 5, 0, 1, 400*ms, 400*ms), "1", "1000000", "5"), // 1 per s: what is missing still refills at 10 per s
}

// bucketSteps runs on the token bucket and on GCRA alike with 3 per s and a
// capacity (burst) of 5: both must give exactly these replies.
var bucketSteps = []step{
	rate(0, 1, 1, 4, 0, 333_334),
	rate(0, 4, 1, 0, 0, 1_666_667),
	rate(0, 0, 1, 0, 0, 1_666_667),
	rate(100*ms, 1, 0, 0, 233_334, 1_566_667), // one token at 333_333.33 µs: 333_334
	rate(100*ms, 6, 0, 0, -1, 1_566_667),
	rate(333_334, 1, 1, 0, 0, 1_666_666),
	rate(1*sec, 2, 1, 0, 0, 1_666_667),
	persist(rate(1500*ms, 0, 1, 1, 0, 1_166_667)),
	rate(1500*ms, 5, 0, 1, 1_166_667, 1_166_667),
	rate(2_666_667, 5, 1, 0, 0, 1_666_667),
	rate(100*sec, 0, 1, 5, 0, 0), // idle: full again
	rate(100*sec, 5, 1, 0, 0, 1_666_667),
}

// TestStepTables runs every table on miniredis and on the gopher-lua
// sandbox of package verify, each with the now argument and with now unset
// (Redis TIME, following the settable clock), and on a real redis-server
// with the now argument. The same replies are required everywhere.
func TestStepTables(t *testing.T) {
	type run struct {
		b       backend
		useTime bool
	}
	runs := []run{{newMiniredis(t), false}, {newMiniredis(t), true}, {newSandbox(t), false}, {newSandbox(t), true}}
	if r := newRedis(t); r != nil {
		runs = append(runs, run{r, false})
	}
	for _, r := range runs {
		name := r.b.Name()
		if r.useTime {
			name += "/TIME"
		}
		t.Run(name, func(t *testing.T) {
			for _, tb := range append(slices.Clone(tables), skewTables...) {
				t.Run(tb.name, func(t *testing.T) { runTable(t, r.b, tb, r.useTime) })
			}
		})
	}
}
