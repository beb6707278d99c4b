package codec

import "testing"

// Parse and the encoders sit on every command's path: these must stay at
// 0 allocs/op (run with -benchmem).

func benchParse(b *testing.B, line string) {
	l := []byte(line)
	var cmd Command
	b.ReportAllocs()
	b.SetBytes(int64(len(l)))
	for b.Loop() {
		if Parse(l, &cmd) != OK {
			b.Fatal("not OK")
		}
	}
}

func BenchmarkParsePut(b *testing.B)     { benchParse(b, "put 1024 0 120 65535") }
func BenchmarkParseReserve(b *testing.B) { benchParse(b, "reserve") }
func BenchmarkParseReserveWithTimeout(b *testing.B) {
	benchParse(b, "reserve-with-timeout 10")
}
func BenchmarkParseDelete(b *testing.B) { benchParse(b, "delete 18446744073709551615") }
func BenchmarkParseUse(b *testing.B)    { benchParse(b, "use some.tube-name_01") }

func BenchmarkAppendStats(b *testing.B) {
	s := sampleStats()
	buf := make([]byte, 0, 2048)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendStats(buf[:0], s)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkAppendJobStats(b *testing.B) {
	js := &JobStats{ID: 123456, Tube: []byte("default"), State: "reserved", TTR: 120, TimeLeft: 119}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendJobStats(buf[:0], js)
	}
}
