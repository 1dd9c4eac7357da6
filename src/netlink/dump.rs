//! A dump that is whole: asked again when its answer was cut, its answers
//! were dropped, or the kernel flagged it interrupted, up to a number of
//! attempts. rtnetlink (node IPs) and ctnetlink (conntrack) dumps use it;
//! each component names the failure in its own error type.

use std::io;
use std::time::Duration;

use super::{Failure, Reply};
use crate::codec::DecodeError;

/// Why a dump gave no whole answer.
#[derive(Debug)]
pub(crate) enum DumpError {
    /// The socket failed, or the request got no outcome.
    Io(io::Error),
    /// The kernel refused the dump with this errno.
    Kernel(i32),
    /// A message of the answer did not decode.
    Decode(DecodeError),
    /// No answer within the socket's timeout.
    TimedOut(Duration),
    /// Every attempt came back incomplete; `last` says how the last did.
    Incomplete {
        /// Attempts made.
        attempts: u32,
        /// How the last attempt was incomplete.
        last: Incomplete,
    },
}

/// How an attempt was incomplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Incomplete {
    /// Flagged `NLM_F_DUMP_INTR`: what was dumped changed meanwhile.
    Interrupted,
    /// An answer datagram overflowed the receive buffer.
    Truncated,
    /// Answers were dropped (receive buffer overrun).
    Lost,
}

impl Incomplete {
    /// The reason, for an error message.
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Incomplete::Interrupted => "the kernel kept flagging the dump interrupted",
            Incomplete::Truncated => "answer datagrams kept overflowing the receive buffer",
            Incomplete::Lost => "the kernel kept dropping the answers (receive buffer overrun)",
        }
    }
}

/// Runs `once` (one dump through the pipeline, returning its reply) until
/// an attempt is whole, at most `max_attempts` times; returns the data,
/// flattened, and the number of attempts. Each attempt starts from nothing.
pub(crate) fn whole<D: IntoIterator>(
    max_attempts: u32,
    mut once: impl FnMut() -> io::Result<Option<Reply<D>>>,
) -> Result<(Vec<D::Item>, u32), DumpError> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        let reply = once()
            .map_err(DumpError::Io)?
            .ok_or_else(|| DumpError::Io(io::Error::other("the dump got no outcome")))?;
        let last = match reply.result {
            Ok(()) if !reply.interrupted => {
                return Ok((reply.data.into_iter().flatten().collect(), attempts));
            }
            Ok(()) => Incomplete::Interrupted,
            Err(Failure::Truncated) => Incomplete::Truncated,
            Err(Failure::Lost | Failure::Unanswered) => Incomplete::Lost,
            Err(Failure::Kernel(e)) => return Err(DumpError::Kernel(e.errno())),
            Err(Failure::Decode(e)) => return Err(DumpError::Decode(e)),
            Err(Failure::TimedOut { waited }) => return Err(DumpError::TimedOut(waited)),
        };
        if attempts >= max_attempts {
            return Err(DumpError::Incomplete { attempts, last });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(
        data: Vec<Option<u8>>,
        interrupted: bool,
        result: Result<(), Failure>,
    ) -> Reply<Option<u8>> {
        Reply {
            data,
            datagrams: 1,
            interrupted,
            result,
        }
    }

    #[test]
    fn an_interrupted_or_cut_dump_is_asked_again_and_the_last_whole_one_counts() {
        let mut answers = vec![
            reply(vec![Some(1)], true, Ok(())),
            reply(vec![Some(2)], false, Err(Failure::Truncated)),
            reply(vec![Some(3), None, Some(4)], false, Ok(())),
        ]
        .into_iter();
        let (data, attempts) = whole(5, || Ok(answers.next())).unwrap();
        assert_eq!((data, attempts), (vec![3, 4], 3));
    }

    #[test]
    fn attempts_end_with_how_the_last_was_incomplete() {
        let mut n = 0;
        let e = whole(3, || {
            n += 1;
            Ok(Some(reply(vec![], false, Err(Failure::Lost))))
        })
        .unwrap_err();
        assert!(matches!(
            e,
            DumpError::Incomplete {
                attempts: 3,
                last: Incomplete::Lost
            }
        ));
        assert_eq!(n, 3);
    }

    #[test]
    fn a_refusal_or_a_timeout_is_not_asked_again() {
        let e = whole(5, || {
            Ok(Some(reply(
                vec![],
                false,
                Err(Failure::TimedOut {
                    waited: Duration::from_millis(5),
                }),
            )))
        })
        .unwrap_err();
        assert!(matches!(e, DumpError::TimedOut(_)));
        let e = whole::<Vec<u8>>(5, || Ok(None)).unwrap_err();
        assert!(matches!(e, DumpError::Io(_)));
    }
}
