module kfchaos.test/goparse

go 1.22

require github.com/docker/go-units v0.5.0
