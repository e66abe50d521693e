//! Tests of the command line as a whole (each command's own are beside it).

use crate::Cli;
use clap::CommandFactory;

/// Every argument of `cmd` and its subcommands, positional ones included, that has no help
/// text, as `crucible rollouts submit --out`.
fn undocumented(cmd: &clap::Command, parent: &str, out: &mut Vec<String>) {
    let path = format!("{parent} {}", cmd.get_name()).trim().to_owned();
    for arg in cmd.get_arguments() {
        if arg.get_help().is_none() && arg.get_long_help().is_none() {
            let name = match arg.get_long() {
                Some(long) => format!("--{long}"),
                None => format!("<{}>", arg.get_id()),
            };
            out.push(format!("{path} {name}"));
        }
    }
    for sub in cmd.get_subcommands() {
        undocumented(sub, &path, out);
    }
}

#[test]
fn every_argument_has_help() {
    let mut missing = Vec::new();
    undocumented(&Cli::command(), "", &mut missing);
    assert!(
        missing.is_empty(),
        "arguments without help (a `///` comment or `help =`):\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_command_line_is_consistent() {
    // clap's own checks: conflicting names, `requires` of arguments that do not exist, ...
    Cli::command().debug_assert();
}
