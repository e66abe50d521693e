use super::*;
use crate::episode::TurnStatus;
use crate::prompt::{Prompt, PromptOption, PromptSettings};
use crucible_shared::ids::BatchId;
use crucible_shared::request::Backend;
use serde_json::json;

fn prompt(text: &str) -> Prompt {
    Prompt {
        text: text.into(),
        settings: PromptSettings {
            option: PromptOption::ZeroShot,
            backend: Backend::Triton,
            thinking: false,
            k: None,
        },
        examples: vec![],
        response_format: "write <KERNEL> then one block".into(),
    }
}

fn turn(turn: u32, status: TurnStatus, reward: Option<f64>, done: bool) -> TurnView {
    TurnView {
        episode_id: EpisodeId("e_1".into()),
        turn,
        status,
        batch_id: BatchId("b_1".into()),
        reward,
        feedback: if status == TurnStatus::Scored {
            "compiled; wrong".into()
        } else {
            String::new()
        },
        rollout: None,
        done,
        next_prompt: (status == TurnStatus::Scored && !done).then(|| prompt("improve it")),
        returns: done.then(|| vec![0.5]),
    }
}

fn episode(turns: Vec<TurnView>) -> EpisodeView {
    let done = turns.last().is_some_and(|t| t.done);
    EpisodeView {
        episode_id: EpisodeId("e_1".into()),
        group_id: None,
        problem: Some(ProblemRef { level: 1, id: 19 }),
        problem_hash: "sha256:00".into(),
        profile: Default::default(),
        max_turns: 4,
        gamma: 0.4,
        prompt: prompt("first"),
        done,
        returns: turns.last().and_then(|t| t.returns.clone()),
        turns,
    }
}

fn info(id: u32) -> ProblemInfo {
    ProblemInfo {
        level: 1,
        id,
        name: format!("p{id}"),
        hash: format!("sha256:{id}"),
    }
}

#[test]
fn an_empty_reset_is_every_default_and_the_default_episode_is_post_episodes_own() {
    let reset: OpenEnvReset = serde_json::from_value(json!({})).unwrap();
    assert_eq!(reset, OpenEnvReset::default());
    reset.validate().unwrap();
    let episode = default_episode();
    assert_eq!(
        episode.max_turns,
        crucible_shared::bounds::EPISODE_TURNS.default
    );
    assert_eq!(
        episode.gamma,
        crucible_shared::bounds::EPISODE_GAMMA.default
    );
    assert!(episode.early_stop_on_correct);
    assert!(episode.problem.is_none() && episode.reference_code.is_none());
}

#[test]
fn reset_refuses_unknown_fields_an_episode_id_with_more_and_a_group() {
    let unknown = serde_json::from_value::<OpenEnvReset>(json!({"sed": 1})).unwrap_err();
    assert!(
        unknown.to_string().contains("unknown field `sed`"),
        "{unknown}"
    );
    let both: OpenEnvReset =
        serde_json::from_value(json!({"episode_id": "e_1", "seed": 3})).unwrap();
    assert_eq!(
        both.validate().unwrap_err().field.as_deref(),
        Some("episode_id")
    );
    let group: OpenEnvReset =
        serde_json::from_value(json!({"episode": {"group_size": 4}})).unwrap();
    assert_eq!(
        group.validate().unwrap_err().field.as_deref(),
        Some("episode.group_size")
    );
    let named: OpenEnvReset =
        serde_json::from_value(json!({"episode": {"problem": {"level": 1, "id": 19}}})).unwrap();
    assert!(named.names_problem());
    assert!(!OpenEnvReset::default().names_problem());
}

#[test]
fn the_seed_picks_by_position_modulo_the_split() {
    let split = [info(3), info(7), info(9)];
    let pick = |seed| pick_problem(&split, seed).map(|p| p.id);
    assert_eq!(pick(0), Some(3));
    assert_eq!(pick(2), Some(9));
    assert_eq!(pick(4), Some(7));
    assert_eq!(pick(u64::MAX), Some(split[(u64::MAX % 3) as usize].id));
    assert_eq!(pick_problem(&[], 1), None);
}

#[test]
fn an_action_is_a_completion_and_typed_clients_metadata_is_accepted() {
    let action: OpenEnvAction =
        serde_json::from_value(json!({"completion": "x", "metadata": {"k": 1}})).unwrap();
    assert_eq!(action.completion, "x");
    assert!(serde_json::from_value::<OpenEnvAction>(json!({"code": "x"})).is_err());
    assert!(serde_json::from_value::<OpenEnvAction>(json!({})).is_err());
}

#[test]
fn the_http_step_wait_defaults_and_is_bounded() {
    let step = |timeout: Option<f64>| OpenEnvStepRequest {
        action: OpenEnvAction {
            completion: "x".into(),
            metadata: Default::default(),
        },
        episode_id: EpisodeId("e_1".into()),
        turn: None,
        timeout_s: timeout,
        request_id: None,
    };
    assert_eq!(
        step(None).wait_s().unwrap(),
        OPENENV_HTTP_STEP_WAIT_S.default
    );
    assert_eq!(step(Some(5.0)).wait_s().unwrap(), 5.0);
    assert_eq!(
        step(Some(61.0)).wait_s().unwrap_err().field.as_deref(),
        Some("timeout_s")
    );
    assert!(step(Some(-1.0)).wait_s().is_err());
    assert!(step(Some(f64::NAN)).wait_s().is_err());
}

#[test]
fn observations_carry_the_prompt_to_answer_and_the_last_turn() {
    let fresh = episode_observation(&episode(vec![]));
    assert_eq!(fresh.observation.prompt.as_deref(), Some("first"));
    assert_eq!(
        (fresh.observation.turns, fresh.reward, fresh.done),
        (0, None, false)
    );

    let before = episode(vec![]);
    let scored = turn_observation(&before, &turn(0, TurnStatus::Scored, Some(0.1), false));
    assert_eq!(scored.observation.prompt.as_deref(), Some("improve it"));
    assert_eq!(
        (scored.observation.turns, scored.reward, scored.done),
        (1, Some(0.1), false)
    );
    assert_eq!(scored.observation.feedback, "compiled; wrong");

    let pending = turn_observation(&before, &turn(0, TurnStatus::Pending, None, false));
    assert_eq!(
        (
            pending.observation.prompt.as_deref(),
            pending.reward,
            pending.done
        ),
        (None, None, false)
    );
    assert_eq!(
        pending.observation.last_turn.unwrap().status,
        TurnStatus::Pending
    );

    let last = turn(1, TurnStatus::Scored, Some(1.0), true);
    let ended = episode(vec![
        turn(0, TurnStatus::Scored, Some(0.1), false),
        last.clone(),
    ]);
    let done = turn_observation(&ended, &last);
    assert!(done.done && done.observation.prompt.is_none());
    assert_eq!(done.observation.returns, Some(vec![0.5]));
    assert_eq!(episode_observation(&ended), done);

    let state = episode_state(&ended);
    assert_eq!((state.step_count, state.done), (2, true));
    assert_eq!(state.rewards, vec![Some(0.1), Some(1.0)]);
}

#[test]
fn websocket_messages_and_replies_have_openenvs_shapes() {
    let reset: OpenEnvMessage = serde_json::from_value(json!({"type": "reset"})).unwrap();
    assert_eq!(
        reset,
        OpenEnvMessage::Reset {
            data: serde_json::Value::Null
        }
    );
    let step: OpenEnvMessage =
        serde_json::from_value(json!({"type": "step", "data": {"completion": "x"}})).unwrap();
    assert!(matches!(step, OpenEnvMessage::Step { .. }));
    for m in [json!({"type": "state"}), json!({"type": "close"})] {
        serde_json::from_value::<OpenEnvMessage>(m).unwrap();
    }
    assert!(serde_json::from_value::<OpenEnvMessage>(json!({"type": "step"})).is_err());
    assert!(serde_json::from_value::<OpenEnvMessage>(json!({"type": "reset", "x": 1})).is_err());

    let observed = Box::new(episode_observation(&episode(vec![])));
    let reply = serde_json::to_value(OpenEnvReply::Observation(observed)).unwrap();
    assert_eq!(reply["type"], "observation");
    assert_eq!(reply["data"]["observation"]["prompt"], "first");
    assert_eq!(reply["data"]["done"], false);
    assert!(reply["data"]["reward"].is_null());
    let state = serde_json::to_value(OpenEnvReply::State(OpenEnvState::default())).unwrap();
    assert_eq!(
        state,
        json!({"type": "state", "data": {"episode_id": null, "step_count": 0, "done": false, "rewards": []}})
    );
    let error = serde_json::to_value(OpenEnvReply::Error(OpenEnvError::from_api(
        &ApiError::invalid("completion", "is empty"),
    )))
    .unwrap();
    assert_eq!(error["data"]["code"], "VALIDATION_ERROR");
    assert_eq!(error["data"]["api_code"], "VALIDATION");
    assert_eq!(error["data"]["field"], "completion");
    let missing = OpenEnvError::from_api(&ApiError::not_found("episode e_2"));
    assert_eq!(
        (missing.code.as_str(), missing.api_code.as_deref()),
        ("EXECUTION_ERROR", Some("NOT_FOUND"))
    );
}

#[test]
fn the_schemas_are_the_types_own_and_their_references_resolve() {
    let schemas = schemas();
    assert_eq!(schemas["action"]["required"], json!(["completion"]));
    let refs = schemas.to_string();
    let components = schemas["components"]["schemas"].as_object().unwrap();
    for part in refs.split("#/components/schemas/").skip(1) {
        let name = part.split('"').next().unwrap();
        assert!(
            components.contains_key(name),
            "{name} is referenced but not given"
        );
    }
    assert!(
        components.contains_key("TurnView"),
        "{:?}",
        components.keys()
    );
}
