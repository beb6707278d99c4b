module github.com/beanpole/beanpole/e2e

go 1.26.8

require (
	github.com/anishathalye/porcupine v1.0.3
	github.com/beanpole/beanpole v0.0.0
	github.com/beanstalkd/go-beanstalk v0.2.0
	github.com/chromedp/cdproto v0.159.0
	github.com/chromedp/chromedp v0.23.0
	github.com/hashicorp/raft v1.8.0
	github.com/prometheus/client_model v0.6.3
	github.com/prometheus/common v0.72.0
	golang.org/x/sys v0.49.0
)

require (
	github.com/fatih/color v1.13.0 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/hashicorp/go-hclog v1.6.3 // indirect
	github.com/hashicorp/go-immutable-radix v1.3.1 // indirect
	github.com/hashicorp/go-metrics v0.7.0 // indirect
	github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect
	github.com/hashicorp/golang-lru v1.0.2 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)

replace (
	github.com/beanpole/beanpole => ../
	github.com/panjf2000/gnet/v2 => ../third_party/gnet
)
