package scripts

import (
	"reflect"
	"testing"
)

func TestListReturn(t *testing.T) {
	var r CountsResult
	if got := reflect.TypeOf(r.Counts); got != reflect.TypeOf([]int64(nil)) {
		t.Errorf("CountsResult.Counts is a %v, want []int64", got)
	}
	if got := reflect.TypeOf(r.Total); got != reflect.TypeOf(int64(0)) {
		t.Errorf("CountsResult.Total is a %v, want int64", got)
	}
}
