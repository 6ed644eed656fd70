//! The engine's and the API's integration tests, one binary: each module is
//! what one file proved before (its opening comment says what), and most
//! run every test on SQLite and on PostgreSQL (`both_backends!`). One
//! binary links the crate once instead of fourteen times, and its two test
//! threads never idle while another binary waits on its slowest test.

mod api;
mod checker_photos;
mod checkers;
mod conformance;
mod driver;
mod execution;
mod jobs;
mod mock_provider;
mod parked;
mod providers;
mod repairs;
mod spend;
mod storage;
mod webhooks;
mod worker;
