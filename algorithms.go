package sluice

import (
	"fmt"

	"github.com/sluice-go/sluice/runtime/luart"
	"github.com/sluice-go/sluice/scripts"
)

// algorithm is what the Limiter knows of one algorithm's script: how to
// call it for a limit, how to read its reply, and the algorithm's number
// in refund.lua. It is the one table the pipeline reads; nothing else
// switches on the algorithm to reach Redis.
type algorithm struct {
	call    func(key string, lim Limit, cost int64, now *int64, peek bool) luart.Call
	decode  func(luart.Reply) (decision, error)
	refund  int64        // 0: no refund (concurrency slots are released instead)
	reserve *reservation // nil: the algorithm cannot reserve (docs/limiter.md says why)
}

// reservation is how an algorithm that can reserve (Limiter.Reserve, Wait)
// books a cost and cancels a booking. Both reserve scripts reply the same
// shape (ok, delay, act_at, and the state written as a TAT and remainder),
// which booked reads into a decision.
type reservation struct {
	call         func(key string, lim Limit, cost, maxWait int64, now *int64) luart.Call
	decode       func(luart.Reply) (decision, error)
	cancel       func(key string, lim Limit, cost, tat, rem, actAt int64, now *int64) luart.Call
	decodeCancel func(luart.Reply) (decision, error)
}

var peekTrue = true

func peekArg(peek bool) *bool {
	if peek {
		return &peekTrue
	}
	return nil
}

var (
	algFixedWindow = algorithm{
		call: func(k string, lim Limit, cost int64, now *int64, peek bool) luart.Call {
			return scripts.FixedWindow.Call(scripts.FixedWindowKeys{State: k},
				scripts.FixedWindowArgs{Limit: lim.Rate, Period: lim.periodMicros(), Cost: cost, Now: now, Peek: peekArg(peek)})
		},
		decode: decode4(scripts.FixedWindow.DecodeReply),
		refund: 1,
	}
	algSlidingLog = algorithm{
		call: func(k string, lim Limit, cost int64, now *int64, peek bool) luart.Call {
			return scripts.SlidingLog.Call(scripts.SlidingLogKeys{Log: k},
				scripts.SlidingLogArgs{Limit: lim.Rate, Period: lim.periodMicros(), Cost: cost, Now: now, Peek: peekArg(peek)})
		},
		decode: decode4(scripts.SlidingLog.DecodeReply),
		refund: 2,
	}
	algSlidingWindow = algorithm{
		call: func(k string, lim Limit, cost int64, now *int64, peek bool) luart.Call {
			return scripts.SlidingWindow.Call(scripts.SlidingWindowKeys{State: k},
				scripts.SlidingWindowArgs{Limit: lim.Rate, Period: lim.periodMicros(), Cost: cost, Now: now, Peek: peekArg(peek)})
		},
		decode: decode4(scripts.SlidingWindow.DecodeReply),
		refund: 3,
	}
	algTokenBucket = algorithm{
		call: func(k string, lim Limit, cost int64, now *int64, peek bool) luart.Call {
			return scripts.TokenBucket.Call(scripts.TokenBucketKeys{State: k},
				scripts.TokenBucketArgs{Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, Now: now, Peek: peekArg(peek)})
		},
		decode: decode4(scripts.TokenBucket.DecodeReply),
		refund: 4,
		reserve: &reservation{
			call: func(k string, lim Limit, cost, maxWait int64, now *int64) luart.Call {
				return scripts.TokenBucketReserve.Call(scripts.TokenBucketReserveKeys{State: k}, scripts.TokenBucketReserveArgs{
					Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, MaxWait: maxWait, Now: now})
			},
			decode: func(r luart.Reply) (decision, error) {
				m, err := scripts.TokenBucketReserve.DecodeReply(r)
				return booked(m.Ok, m.Delay, m.ActAt, m.Tat, m.Rem), err
			},
			cancel: func(k string, lim Limit, cost, tat, rem, actAt int64, now *int64) luart.Call {
				return scripts.TokenBucketCancel.Call(scripts.TokenBucketCancelKeys{State: k}, scripts.TokenBucketCancelArgs{
					Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, Tat: tat, Rem: rem, ActAt: actAt, Now: now})
			},
			decodeCancel: func(r luart.Reply) (decision, error) {
				_, err := scripts.TokenBucketCancel.DecodeReply(r)
				return decision{}, err
			},
		},
	}
	algGCRA = algorithm{
		call: func(k string, lim Limit, cost int64, now *int64, peek bool) luart.Call {
			return scripts.GCRA.Call(scripts.GCRAKeys{State: k},
				scripts.GCRAArgs{Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, Now: now, Peek: peekArg(peek)})
		},
		decode: decode4(scripts.GCRA.DecodeReply),
		refund: 5,
		reserve: &reservation{
			call: func(k string, lim Limit, cost, maxWait int64, now *int64) luart.Call {
				return scripts.GCRAReserve.Call(scripts.GCRAReserveKeys{State: k}, scripts.GCRAReserveArgs{
					Limit: lim.Rate, Period: lim.periodMicros(), Burst: lim.Burst, Cost: cost, MaxWait: maxWait, Now: now})
			},
			decode: func(r luart.Reply) (decision, error) {
				m, err := scripts.GCRAReserve.DecodeReply(r)
				return booked(m.Ok, m.Delay, m.ActAt, m.Tat, m.Rem), err
			},
			cancel: func(k string, lim Limit, cost, tat, rem, actAt int64, now *int64) luart.Call {
				return scripts.GCRACancel.Call(scripts.GCRACancelKeys{State: k}, scripts.GCRACancelArgs{
					Limit: lim.Rate, Period: lim.periodMicros(), Cost: cost, Tat: tat, Rem: rem, ActAt: actAt, Now: now})
			},
			decodeCancel: func(r luart.Reply) (decision, error) {
				_, err := scripts.GCRACancel.DecodeReply(r)
				return decision{}, err
			},
		},
	}
	// A concurrency check's call is built by acquireCall (it needs the
	// holder); the table reads its reply.
	algConcurrency = algorithm{decode: decode4(scripts.ConcurrencyAcquire.DecodeReply)}
)

// booked is a reserve script's reply as a decision: allowed is ok,
// remaining the delay, retryAfter act_at, resetAfter and limiting the TAT
// written and its remainder (Reservation reads them back).
func booked(ok bool, delay, actAt, tat, rem int64) decision {
	return decision{allowed: ok, remaining: delay, retryAfter: actAt, resetAfter: tat, limiting: rem}
}

// algorithmOf is lim's entry in the table (lim is validated).
func algorithmOf(lim Limit) *algorithm {
	switch lim.Algorithm {
	case AlgFixedWindow:
		return &algFixedWindow
	case AlgSlidingLog:
		return &algSlidingLog
	case AlgSlidingWindow:
		return &algSlidingWindow
	case AlgTokenBucket:
		return &algTokenBucket
	case AlgConcurrency:
		return &algConcurrency
	default:
		return &algGCRA
	}
}

// reply4 is the reply every single-limit script shares.
type reply4 = struct {
	Allowed    bool
	Remaining  int64
	RetryAfter int64
	ResetAfter int64
}

// decode4 turns a generated decoder of the shared reply into the
// pipeline's.
func decode4[T ~reply4](dec func(luart.Reply) (T, error)) func(luart.Reply) (decision, error) {
	return func(r luart.Reply) (decision, error) {
		m, err := dec(r)
		v := reply4(m)
		return decision{v.Allowed, v.Remaining, v.RetryAfter, v.ResetAfter, 0}, err
	}
}

// multiCall builds the multi-limit script call (fold) for limits of one algorithm
// (validated by the caller), one key per limit, and its decoder. With
// each (3 numbers per limit) the script also replies every limit's own
// remaining, retry_after and reset_after, which the decoder copies into
// each.
func multiCall(keys []string, limits []Limit, cost int64, now *int64, each []int64) (luart.Call, func(luart.Reply) (decision, error)) {
	var flag *bool
	if each != nil {
		t := true
		flag = &t
	}
	if limits[0].Algorithm == AlgGCRA {
		nums := make([]int64, 0, 3*len(limits))
		for _, lim := range limits {
			nums = append(nums, lim.Rate, lim.periodMicros(), lim.Burst)
		}
		call := scripts.GCRAMulti.Call(scripts.GCRAMultiKeys{States: keys}, scripts.GCRAMultiArgs{Cost: cost, Now: now, Each: flag, Limits: nums})
		if each == nil {
			return call, decodeGcraMulti
		}
		return call, func(r luart.Reply) (decision, error) {
			m, err := scripts.GCRAMulti.DecodeReply(r)
			return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, copyEach(scripts.GCRAMulti.Name, each, m.PerLimit, err)
		}
	}
	nums := make([]int64, 0, 2*len(limits))
	for _, lim := range limits {
		nums = append(nums, lim.Rate, lim.periodMicros())
	}
	if limits[0].Algorithm == AlgFixedWindow {
		call := scripts.FixedWindowMulti.Call(scripts.FixedWindowMultiKeys{States: keys}, scripts.FixedWindowMultiArgs{Cost: cost, Now: now, Each: flag, Limits: nums})
		if each == nil {
			return call, decodeFixedWindowMulti
		}
		return call, func(r luart.Reply) (decision, error) {
			m, err := scripts.FixedWindowMulti.DecodeReply(r)
			return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, copyEach(scripts.FixedWindowMulti.Name, each, m.PerLimit, err)
		}
	}
	call := scripts.SlidingWindowMulti.Call(scripts.SlidingWindowMultiKeys{States: keys}, scripts.SlidingWindowMultiArgs{Cost: cost, Now: now, Each: flag, Limits: nums})
	if each == nil {
		return call, decodeSlidingWindowMulti
	}
	return call, func(r luart.Reply) (decision, error) {
		m, err := scripts.SlidingWindowMulti.DecodeReply(r)
		return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, copyEach(scripts.SlidingWindowMulti.Name, each, m.PerLimit, err)
	}
}

// copyEach copies script's per-limit numbers into each, which must be
// exactly as long.
func copyEach(script string, each, got []int64, err error) error {
	if err != nil {
		return err
	}
	if len(got) != len(each) {
		return &luart.Error{Script: script, Err: fmt.Errorf("%w: per_limit: want %d numbers, got %d", luart.ErrMalformedReply, len(each), len(got))}
	}
	copy(each, got)
	return nil
}

func decodeGcraMulti(r luart.Reply) (decision, error) {
	m, err := scripts.GCRAMulti.DecodeReply(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
}

func decodeFixedWindowMulti(r luart.Reply) (decision, error) {
	m, err := scripts.FixedWindowMulti.DecodeReply(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
}

func decodeSlidingWindowMulti(r luart.Reply) (decision, error) {
	m, err := scripts.SlidingWindowMulti.DecodeReply(r)
	return decision{m.Allowed, m.Remaining, m.RetryAfter, m.ResetAfter, m.Limiting}, err
}
