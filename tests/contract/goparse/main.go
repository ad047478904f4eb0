// The Go parsers Chaos Mesh's webhook uses, run on each stdin line (a JSON string) and answered as one JSON
// line: time.ParseDuration, strconv.ParseFloat (64 and 32 bits) and docker/go-units v0.5.0 FromHumanSize.
// tests/contract/test_goparse.py compares kfchaos.faultspec.goparse with these answers.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	units "github.com/docker/go-units"
)

type answer struct {
	Ok    bool   `json:"ok"`
	Value string `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

func of(v any, err error) answer {
	if err != nil {
		return answer{Error: err.Error()}
	}
	return answer{Ok: true, Value: fmt.Sprint(v)}
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var s string
		if err := json.Unmarshal(in.Bytes(), &s); err != nil {
			panic(err)
		}
		d, derr := time.ParseDuration(s)
		f64, ferr := strconv.ParseFloat(s, 64)
		f32, f32err := strconv.ParseFloat(s, 32)
		size, serr := units.FromHumanSize(s)
		_ = out.Encode(map[string]answer{
			"duration": of(int64(d), derr),
			"float64":  of(f64, ferr),
			"float32":  of(f32, f32err),
			"size":     of(size, serr),
		})
	}
}
