"""The `varlen` command: `console` answers what needs no Lightning (help, a mistyped command, `verify`),
`dispatch` runs the rest through LightningCLI. Nothing is imported here, so `varlen --help` stays fast."""
