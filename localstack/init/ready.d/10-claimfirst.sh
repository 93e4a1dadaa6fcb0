#!/usr/bin/env bash
# Create claimfirst's queue, dead-letter queue and claim table with awslocal:
# the same resources as template.yaml (and `worker setup`), for local runs.
#
# LocalStack runs it from /etc/localstack/init/ready.d when it is ready. It
# runs anywhere `awslocal` reaches SQS and DynamoDB; against another endpoint
# (the tests use moto) put this `awslocal` first on PATH:
#
#   #!/bin/sh
#   exec aws --endpoint-url "$AWS_ENDPOINT_URL" "$@"
#
# Idempotent: existing queues get their attributes set again, an existing
# table is checked and TTL enabled if it is not. Prints the settings the worker
# needs (QUEUE_URL=..., DLQ_URL=..., CLAIM_TABLE=...) on stdout.
set -euo pipefail

queue_name=${QUEUE_NAME:-payments}
dlq_name=${DLQ_NAME:-payments-dlq}
table=${CLAIM_TABLE:-claims}
visibility=${QUEUE_VISIBILITY_SECONDS:-30}
retention=${QUEUE_RETENTION_SECONDS:-345600}        # 4 days
dlq_retention=${DLQ_RETENTION_SECONDS:-1209600}     # 14 days, the SQS maximum
max_receive_count=${MAX_RECEIVE_COUNT:-5}

# The claim store's defaults (claimstore/dynamo DefaultKeyAttribute and
# DefaultTTLAttribute).
key_attribute=pk
ttl_attribute=expires_at

export AWS_PAGER=""

log() { echo "10-claimfirst: $*" >&2; }

# ensure_queue NAME ATTRIBUTES_JSON prints the queue's URL, creating the queue
# or setting its attributes.
ensure_queue() {
	local name=$1 attributes=$2 url
	if url=$(awslocal sqs get-queue-url --queue-name "$name" --query QueueUrl --output text 2>/dev/null); then
		awslocal sqs set-queue-attributes --queue-url "$url" --attributes "$attributes" >/dev/null
		log "queue $name exists: attributes set"
	else
		url=$(awslocal sqs create-queue --queue-name "$name" --attributes "$attributes" --query QueueUrl --output text)
		log "queue $name created"
	fi
	echo "$url"
}

dlq_url=$(ensure_queue "$dlq_name" "{\"MessageRetentionPeriod\":\"$dlq_retention\"}")
dlq_arn=$(awslocal sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn --query Attributes.QueueArn --output text)
redrive="{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":\\\"$max_receive_count\\\"}"
queue_url=$(ensure_queue "$queue_name" "{\"VisibilityTimeout\":\"$visibility\",\"MessageRetentionPeriod\":\"$retention\",\"RedrivePolicy\":\"$redrive\"}")

# The backquotes are JMESPath literals.
# shellcheck disable=SC2016
if desc=$(awslocal dynamodb describe-table --table-name "$table" \
	--query '[Table.TableStatus, join(`,`, Table.KeySchema[].join(`:`, [AttributeName, KeyType]))]' --output text 2>/dev/null); then
	read -r status keys <<<"$desc"
	if [ "$keys" != "$key_attribute:HASH" ]; then
		log "table $table exists with key schema $keys, want $key_attribute:HASH only"
		exit 1
	fi
	log "table $table exists"
else
	status=$(awslocal dynamodb create-table --table-name "$table" \
		--attribute-definitions "AttributeName=$key_attribute,AttributeType=S" \
		--key-schema "AttributeName=$key_attribute,KeyType=HASH" \
		--billing-mode PAY_PER_REQUEST --query TableDescription.TableStatus --output text)
	log "table $table created"
fi
if [ "$status" != ACTIVE ]; then
	awslocal dynamodb wait table-exists --table-name "$table"
fi

ttl=$(awslocal dynamodb describe-time-to-live --table-name "$table" \
	--query 'TimeToLiveDescription.[TimeToLiveStatus,AttributeName]' --output text)
case "$(echo "$ttl" | tr -s '[:space:]' ' ' | sed 's/ $//')" in
"ENABLED $ttl_attribute" | "ENABLING $ttl_attribute")
	log "table $table: TTL already on $ttl_attribute"
	;;
*)
	awslocal dynamodb update-time-to-live --table-name "$table" \
		--time-to-live-specification "Enabled=true,AttributeName=$ttl_attribute" >/dev/null
	log "table $table: TTL enabled on $ttl_attribute"
	;;
esac

echo "QUEUE_URL=$queue_url"
echo "DLQ_URL=$dlq_url"
echo "CLAIM_TABLE=$table"
