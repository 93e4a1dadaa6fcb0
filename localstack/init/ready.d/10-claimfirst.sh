#!/usr/bin/env bash
# Create claimfirst's queue, dead-letter queue and claim table with awslocal:
# the same resources as template.yaml (and `worker setup`), for local runs.
# A FIFO pair is created too (`worker setup -fifo`): <queue>.fifo redriving
# to <dlq>.fifo, without content-based deduplication; CREATE_FIFO=false
# skips it.
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
# needs (QUEUE_URL=..., DLQ_URL=..., CLAIM_TABLE=..., and FIFO_QUEUE_URL=...,
# FIFO_DLQ_URL=... for the FIFO pair) on stdout.
set -euo pipefail

queue_name=${QUEUE_NAME:-payments}
dlq_name=${DLQ_NAME:-payments-dlq}
table=${CLAIM_TABLE:-claims}
visibility=${QUEUE_VISIBILITY_SECONDS:-30}
retention=${QUEUE_RETENTION_SECONDS:-345600}        # 4 days
dlq_retention=${DLQ_RETENTION_SECONDS:-1209600}     # 14 days, the SQS maximum
max_receive_count=${MAX_RECEIVE_COUNT:-5}
create_fifo=${CREATE_FIFO:-true}
fifo_queue_name=${FIFO_QUEUE_NAME:-$queue_name.fifo}
fifo_dlq_name=${FIFO_DLQ_NAME:-$dlq_name.fifo}

# The claim store's defaults (claimstore/dynamo DefaultKeyAttribute and
# DefaultTTLAttribute).
key_attribute=pk
ttl_attribute=expires_at

export AWS_PAGER=""

log() { echo "10-claimfirst: $*" >&2; }

# ensure_queue NAME ATTRIBUTES_JSON [CREATE_ONLY_JSON_MEMBERS] prints the
# queue's URL, creating the queue or setting its attributes. The third
# argument ("\"FifoQueue\":\"true\"," for a FIFO queue) is given at creation
# only: a queue's type cannot be set afterwards.
ensure_queue() {
	local name=$1 attributes=$2 create_only=${3:-} url
	if url=$(awslocal sqs get-queue-url --queue-name "$name" --query QueueUrl --output text 2>/dev/null); then
		awslocal sqs set-queue-attributes --queue-url "$url" --attributes "$attributes" >/dev/null
		log "queue $name exists: attributes set"
	else
		url=$(awslocal sqs create-queue --queue-name "$name" --attributes "{$create_only${attributes#\{}" --query QueueUrl --output text)
		log "queue $name created"
	fi
	echo "$url"
}

# ensure_pair SOURCE DLQ [CREATE_ONLY_JSON_MEMBERS] [EXTRA_JSON_MEMBERS]
# creates the dead-letter queue, then the source queue redriving to it, and
# sets dlq_url and queue_url. The dead-letter queue's RedriveAllowPolicy
# names the source queue alone: no other queue can dead-letter into it (and
# have `worker redrive` move its messages into the source queue).
ensure_pair() {
	local source=$1 dlq=$2 create_only=${3:-} extra=${4:-} dlq_arn redrive allow
	dlq_url=$(ensure_queue "$dlq" "{$extra\"MessageRetentionPeriod\":\"$dlq_retention\"}" "$create_only")
	dlq_arn=$(awslocal sqs get-queue-attributes --queue-url "$dlq_url" --attribute-names QueueArn --query Attributes.QueueArn --output text)
	allow="{\\\"redrivePermission\\\":\\\"byQueue\\\",\\\"sourceQueueArns\\\":[\\\"${dlq_arn%:*}:$source\\\"]}"
	awslocal sqs set-queue-attributes --queue-url "$dlq_url" --attributes "{\"RedriveAllowPolicy\":\"$allow\"}" >/dev/null
	redrive="{\\\"deadLetterTargetArn\\\":\\\"$dlq_arn\\\",\\\"maxReceiveCount\\\":\\\"$max_receive_count\\\"}"
	queue_url=$(ensure_queue "$source" "{$extra\"VisibilityTimeout\":\"$visibility\",\"MessageRetentionPeriod\":\"$retention\",\"RedrivePolicy\":\"$redrive\"}" "$create_only")
}

if [ "$create_fifo" = true ]; then
	ensure_pair "$fifo_queue_name" "$fifo_dlq_name" '"FifoQueue":"true",' '"ContentBasedDeduplication":"false",'
	fifo_queue_url=$queue_url fifo_dlq_url=$dlq_url
fi
ensure_pair "$queue_name" "$dlq_name"

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
if [ "$create_fifo" = true ]; then
	echo "FIFO_QUEUE_URL=$fifo_queue_url"
	echo "FIFO_DLQ_URL=$fifo_dlq_url"
fi
