//! The broker contract: one suite, every test run against `MemoryBroker` (modules `*::memory`)
//! and against `RedisBroker` on a real `redis-server` child process (modules `*::redis`); the
//! harness is `common/mod.rs`, the tenant part of the contract `tenants.rs`. Most of it submits
//! as the built-in tenant, as a single-user deployment does. One binary, a module a concern.

#[path = "../common/mod.rs"]
mod common;

mod activity;
mod batches;
mod caches;
mod cancel;
mod classes;
mod drain;
mod kv;
mod kv_if_absent;
mod leases;
mod priorities;
mod queue_bytes;
mod reaper_lease;
mod tasks;
