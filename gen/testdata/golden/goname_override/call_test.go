package scripts

import (
	"reflect"
	"testing"
)

func TestBucketCall(t *testing.T) {
	c := Bucket.Call(BucketKeys{Bucket: "{b}:state"}, BucketArgs{Bucket: "tag", TtlMs: 1500})
	if !reflect.DeepEqual(c.Keys, []string{"{b}:state"}) || !reflect.DeepEqual(c.Args, []string{"tag", "1500"}) {
		t.Errorf("Keys %q, Args %q", c.Keys, c.Args)
	}
	if bucketSource == "" || Bucket.Name != "token_bucket" {
		t.Errorf("the script keeps its name %q and source", Bucket.Name)
	}
	var r BucketResult
	r.TokensLeft = 1
	_ = r
}
