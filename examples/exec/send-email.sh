#!/bin/sh
# An exec handler for workerd: the job's payload arrives on standard input,
# and the job's identity in the environment. Exit 0 marks the job done (what
# it prints becomes the job's result); an exit code listed in
# permanent_exit_codes marks it dead; any other exit code retries it.
#
# FENCEQ_JOB_ID and FENCEQ_FENCING_TOKEN together identify this attempt:
# pass them to any system you write to, so that it can refuse the write of
# an older attempt that lost its lease.
set -eu
payload=$(cat)
case "$payload" in
  *'"to"'*) ;;
  *) echo "payload has no \"to\": $payload" >&2; exit 65 ;;
esac
echo "sending email for job $FENCEQ_JOB_ID (attempt $FENCEQ_ATTEMPT, fencing token $FENCEQ_FENCING_TOKEN) via ${SMTP_HOST:-?}" >&2
sleep 1
printf '{"sent":true,"job":"%s"}' "$FENCEQ_JOB_ID"
