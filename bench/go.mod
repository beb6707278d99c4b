module github.com/beanpole/beanpole/bench

go 1.26.8

replace github.com/panjf2000/gnet/v2 => ../third_party/gnet

require (
	github.com/panjf2000/gnet/v2 v2.0.0-00010101000000-000000000000
	golang.org/x/image v0.47.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/panjf2000/ants/v2 v2.12.1 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/sync v0.11.0 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
