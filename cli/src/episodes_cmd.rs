//! `crucible episodes start|turn|show`: multi-turn episodes on a running service
//! (docs/ENVIRONMENT.md, "Episodes"). `start` prints the episode ids and the first prompt,
//! `turn` posts a completion file and waits for its reward, feedback and next prompt, `show`
//! prints the episode with every turn and, once done, the returns. Answers are JSON on stdout.

use crate::{BACKEND_HELP, BackendArg, Remote};
use anyhow::Context;
use clap::Subcommand;
use crucible_rl::episode::{EpisodeRequest, TurnRequest};
use crucible_rl::prompt::PromptOption;
use crucible_rl::reward::RewardProfile;
use crucible_shared::{EpisodeId, ProblemRef};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Subcommand)]
pub enum EpisodesCommand {
    /// Start an episode (or a group of them) of a registered problem or a reference file.
    Start {
        #[command(flatten)]
        remote: Remote,
        /// The problem's level (with `--problem-id`) ...
        #[arg(long, requires = "problem_id", conflicts_with = "reference")]
        level: Option<u32>,
        /// ... and its id in the level.
        #[arg(long, requires = "level")]
        problem_id: Option<u32>,
        /// Or the reference source file.
        #[arg(long, required_unless_present = "level")]
        reference: Option<PathBuf>,
        #[arg(long, value_enum, default_value = "triton", help = BACKEND_HELP)]
        backend: BackendArg,
        /// `kernel_rl`, `kevin` or `drkernel`.
        #[arg(long, default_value = "kernel_rl", value_parser = parse_profile)]
        profile: RewardProfile,
        /// `zero_shot`, `one_shot`, `few_shot` or `raicl`.
        #[arg(long, default_value = "zero_shot", value_parser = parse_option)]
        prompt_option: PromptOption,
        /// Ask for a `<think>` section first (`true`/`false`; left out: when the profile
        /// rewards thinking).
        #[arg(long)]
        thinking: Option<bool>,
        /// Most turns (server default 4).
        #[arg(long)]
        max_turns: Option<u32>,
        /// Discount of the returns (server default 0.4).
        #[arg(long)]
        gamma: Option<f64>,
        /// Go on after a correct kernel.
        #[arg(long)]
        no_early_stop: bool,
        /// Stop early only at a correct kernel at least this fast.
        #[arg(long)]
        speedup_threshold: Option<f64>,
        /// Start this many episodes of the problem (a GRPO group).
        #[arg(long)]
        group_size: Option<u32>,
    },
    /// Post a turn's completion (a file; `-` for stdin) and wait for its score.
    Turn {
        #[command(flatten)]
        remote: Remote,
        /// The episode (`e_...`).
        episode: String,
        /// The completion file.
        #[arg(long)]
        completion: PathBuf,
        /// The turn it answers (default: the next one).
        #[arg(long)]
        turn: Option<u32>,
        /// Longest wait for the evaluation.
        #[arg(long, default_value_t = 600)]
        wait_s: u64,
    },
    /// Print an episode with every turn so far.
    Show {
        #[command(flatten)]
        remote: Remote,
        /// The episode (`e_...`).
        episode: String,
        /// Long-poll up to this long for its last turn.
        #[arg(long, default_value_t = 0)]
        wait_s: u64,
    },
}

fn parse_profile(s: &str) -> Result<RewardProfile, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|e| e.to_string())
}

fn parse_option(s: &str) -> Result<PromptOption, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|e| e.to_string())
}

fn read(path: &PathBuf) -> anyhow::Result<String> {
    if path.as_os_str() == "-" {
        return std::io::read_to_string(std::io::stdin()).context("reading stdin");
    }
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

pub async fn run(command: EpisodesCommand) -> anyhow::Result<()> {
    let answer = match command {
        EpisodesCommand::Start {
            remote,
            level,
            problem_id,
            reference,
            backend,
            profile,
            prompt_option,
            thinking,
            max_turns,
            gamma,
            no_early_stop,
            speedup_threshold,
            group_size,
        } => {
            let mut body = serde_json::json!({
                "backend": crucible_shared::Backend::from(backend),
                "profile": profile,
                "prompt_option": prompt_option,
                "early_stop_on_correct": !no_early_stop,
            });
            if let Some(thinking) = thinking {
                body["thinking"] = thinking.into();
            }
            if let (Some(level), Some(id)) = (level, problem_id) {
                body["problem"] = serde_json::to_value(ProblemRef { level, id })?;
            }
            if let Some(path) = &reference {
                body["reference_code"] = read(path)?.into();
            }
            for (key, value) in [
                ("max_turns", max_turns.map(serde_json::Value::from)),
                ("gamma", gamma.map(serde_json::Value::from)),
                (
                    "speedup_threshold",
                    speedup_threshold.map(serde_json::Value::from),
                ),
                ("group_size", group_size.map(serde_json::Value::from)),
            ] {
                if let Some(v) = value {
                    body[key] = v;
                }
            }
            // Through the wire type, so the server's defaults fill what was left out.
            let request: EpisodeRequest = serde_json::from_value(body)?;
            serde_json::to_value(remote.client().start_episode(&request).await?)?
        }
        EpisodesCommand::Turn {
            remote,
            episode,
            completion,
            turn,
            wait_s,
        } => {
            let client = remote.client();
            let id = EpisodeId(episode);
            let timeout = Duration::from_secs(wait_s);
            let request = TurnRequest {
                completion: read(&completion)?,
                turn,
            };
            let posted = client.post_turn(&id, &request, timeout).await?;
            let view = client.wait_turn(&id, posted.turn, timeout).await?;
            serde_json::to_value(view)?
        }
        EpisodesCommand::Show {
            remote,
            episode,
            wait_s,
        } => {
            let view = remote
                .client()
                .episode(&EpisodeId(episode), Duration::from_secs(wait_s))
                .await?;
            serde_json::to_value(view)?
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}
