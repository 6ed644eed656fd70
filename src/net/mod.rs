//! The network edge shared by everything that calls out: the address guard
//! that keeps providers' downloads and webhook posts out of our own network.
//! It knows URLs and addresses, nothing of jobs or people, so both
//! `providers` and the webhook dispatcher use it from below.

pub mod guard;
