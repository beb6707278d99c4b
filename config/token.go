package config

import (
	"bytes"
	"errors"
	"os"
)

// ReadToken reads the dashboard's token (--http-token-file, and the
// --token-file of beanpole cluster): the file's content without
// surrounding white space, which must leave something.
func ReadToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if b = bytes.TrimSpace(b); len(b) == 0 {
		return nil, errors.New(path + " is empty")
	}
	return b, nil
}
