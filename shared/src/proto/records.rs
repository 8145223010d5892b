//! Reading a job list answer record by record. A [`Response::Jobs`] over 100,000 jobs decoded
//! whole is a vector of 100,000 full `JobInfo`s (three quarters of a kilobyte each before their
//! text); `squeue` only needs one at a time to render its line and sort key, so it walks the
//! payload with [`read_jobs`] instead. The bytes are the protocol's, unchanged: this is a second
//! reader of the same encoding, pinned by a test against the derived decoder.

use super::client::Response;
use super::frame::FrameError;
use crate::UnixTime;
use crate::job::JobInfo;

/// `Response::Jobs`'s position among `Response`'s variants (pinned by the tests below).
pub const JOBS_VARIANT: u32 = 1;

/// `Response::JobLines`'s position among `Response`'s variants (pinned by the tests below).
pub const JOB_LINES_VARIANT: u32 = 22;

/// A decoded answer: a job list to walk, or any other answer decoded whole.
#[derive(Debug)]
pub enum Answer<'a> {
    Jobs { now: UnixTime, records: JobRecords<'a> },
    Other(Response),
}

/// The records of a job list answer, decoded one per [`Iterator::next`].
#[derive(Debug)]
pub struct JobRecords<'a> {
    rest: &'a [u8],
    left: usize,
}

impl JobRecords<'_> {
    /// How many records the answer announced, bounded by the bytes present (every record takes
    /// at least one), so it is safe to allocate for.
    pub fn announced(&self) -> usize {
        self.left.min(self.rest.len())
    }
}

impl Iterator for JobRecords<'_> {
    type Item = Result<JobInfo, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        match postcard::take_from_bytes::<JobInfo>(self.rest) {
            Ok((job, rest)) => {
                self.rest = rest;
                Some(Ok(job))
            }
            Err(error) => {
                self.left = 0;
                Some(Err(error.into()))
            }
        }
    }
}

/// Reads an answer payload: a `Response::Jobs` as a record stream, anything else decoded whole.
pub fn read_jobs(payload: &[u8]) -> Result<Answer<'_>, FrameError> {
    let (variant, rest) = postcard::take_from_bytes::<u32>(payload)?;
    if variant != JOBS_VARIANT {
        return Ok(Answer::Other(postcard::from_bytes(payload)?));
    }
    let (now, rest) = postcard::take_from_bytes::<UnixTime>(rest)?;
    let (left, rest) = postcard::take_from_bytes::<usize>(rest)?;
    Ok(Answer::Jobs { now, records: JobRecords { rest, left } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::JobState;
    use crate::proto::client::ErrorCode;

    /// The stream reader yields exactly what the derived decoder does, for job lists of every
    /// length and for other answers; a cut payload is an error, not a panic or a short list.
    #[test]
    fn records_read_as_the_derived_decoder_does() {
        for count in [0u32, 1, 3, 200] {
            let jobs: Vec<JobInfo> = (1..=count)
                .map(|job_id| JobInfo {
                    job_id,
                    name: format!("job{job_id}"),
                    state: Some(JobState::Pending),
                    nodes: vec!["n1".into(); (job_id % 3) as usize],
                    ..JobInfo::default()
                })
                .collect();
            let payload = postcard::to_allocvec(&Response::Jobs { now: -5, jobs: jobs.clone() }).unwrap();
            let Answer::Jobs { now, records } = read_jobs(&payload).unwrap() else { panic!("not a job list") };
            assert_eq!(now, -5);
            assert_eq!(records.announced(), jobs.len());
            assert_eq!(records.map(Result::unwrap).collect::<Vec<_>>(), jobs);
            if count > 0 {
                let cut = &payload[..payload.len() - 1];
                let Answer::Jobs { records, .. } = read_jobs(cut).unwrap() else { panic!("not a job list") };
                assert!(records.last().unwrap().is_err());
            }
        }
        let error = Response::Error { code: ErrorCode::AccessDenied, detail: "no".into() };
        match read_jobs(&postcard::to_allocvec(&error).unwrap()).unwrap() {
            Answer::Other(other) => assert_eq!(other, error),
            Answer::Jobs { .. } => panic!("an error read as a job list"),
        }
        assert!(read_jobs(&[]).is_err());
        let lines = Response::JobLines { now: 1, count: 0, rows: Vec::new() };
        assert_eq!(u32::from(postcard::to_allocvec(&lines).unwrap()[0]), JOB_LINES_VARIANT);
    }
}
