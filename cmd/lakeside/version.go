package main

import (
	"context"
	"flag"
	"fmt"
	"io"
)

// versionCommand prints the version.
type versionCommand struct{ stdout io.Writer }

func (c *versionCommand) ParseFlags(args []string) error {
	return flag.NewFlagSet("lakeside version", flag.ContinueOnError).Parse(args)
}

func (c *versionCommand) Run(context.Context) error {
	fmt.Fprintf(c.stdout, "lakeside %s\n", Version)
	return nil
}
