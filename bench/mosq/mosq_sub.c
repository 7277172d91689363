/*
 * A QoS 1 subscriber on libmosquitto at its defaults (MQTT 3.1.1, clean
 * session, no TCP_NODELAY), for the benchmark's live consumer.
 *
 *   mosq_sub PORT TOPIC COUNT
 *
 * Subscribes to TOPIC at QoS 1 on 127.0.0.1:PORT and prints `subscribed`
 * once the SUBACK is in. Then takes COUNT messages, each starting with the
 * CLOCK_MONOTONIC time in microseconds (a double) that mosq_pub stamped
 * when it handed the message to its library, and prints
 *
 *   received N        messages taken (duplicates included)
 *   span_us N         first message's stamp to the last arrival
 *   p50_us N          end-to-end latency, nearest rank
 *   p99_us N
 *
 * Fails if no message arrives for IDLE_LIMIT_S seconds.
 */
#include <mosquitto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define IDLE_LIMIT_S 30

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int connected;
static int subscribed;
static long received;
static long count;
static double *latencies_us;
static double first_stamp_us = -1;
static double last_arrival_us;

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void on_connect(struct mosquitto *m, void *u, int rc)
{
	(void)m; (void)u;
	pthread_mutex_lock(&lock);
	connected = rc == 0 ? 1 : -1;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void on_subscribe(struct mosquitto *m, void *u, int mid, int n, const int *granted)
{
	(void)m; (void)u; (void)mid;
	pthread_mutex_lock(&lock);
	subscribed = n == 1 && granted[0] == 1 ? 1 : -1;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void on_message(struct mosquitto *m, void *u, const struct mosquitto_message *message)
{
	(void)m; (void)u;
	double arrival = now_us();
	double stamp;
	if (message->payloadlen < (int)sizeof stamp)
		return;
	memcpy(&stamp, message->payload, sizeof stamp);
	pthread_mutex_lock(&lock);
	if (received < count) {
		if (first_stamp_us < 0)
			first_stamp_us = stamp;
		latencies_us[received++] = arrival - stamp;
		last_arrival_us = arrival;
	}
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double nearest_rank(double fraction)
{
	long rank = (long)(fraction * count + 0.999999);
	if (rank < 1)
		rank = 1;
	return latencies_us[rank - 1];
}

/* Waits while *flag is 0, at most `seconds`; returns its value. */
static int wait_for(int *flag, int seconds)
{
	struct timespec limit;
	clock_gettime(CLOCK_REALTIME, &limit);
	limit.tv_sec += seconds;
	pthread_mutex_lock(&lock);
	while (*flag == 0 && pthread_cond_timedwait(&changed, &lock, &limit) == 0)
		;
	int value = *flag;
	pthread_mutex_unlock(&lock);
	return value;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: %s PORT TOPIC COUNT\n", argv[0]);
		return 2;
	}
	int port = atoi(argv[1]);
	const char *topic = argv[2];
	count = atol(argv[3]);
	latencies_us = calloc(count > 0 ? count : 1, sizeof *latencies_us);

	mosquitto_lib_init();
	struct mosquitto *m = mosquitto_new(NULL, true, NULL);
	mosquitto_connect_callback_set(m, on_connect);
	mosquitto_subscribe_callback_set(m, on_subscribe);
	mosquitto_message_callback_set(m, on_message);
	if (mosquitto_connect(m, "127.0.0.1", port, 60) != MOSQ_ERR_SUCCESS ||
	    mosquitto_loop_start(m) != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "cannot connect to port %d\n", port);
		return 1;
	}
	if (wait_for(&connected, 10) != 1) {
		fprintf(stderr, "no CONNACK\n");
		return 1;
	}
	if (mosquitto_subscribe(m, NULL, topic, 1) != MOSQ_ERR_SUCCESS ||
	    wait_for(&subscribed, 10) != 1) {
		fprintf(stderr, "SUBSCRIBE %s at QoS 1 was not granted\n", topic);
		return 1;
	}
	printf("subscribed\n");
	fflush(stdout);

	pthread_mutex_lock(&lock);
	while (received < count) {
		long before = received;
		struct timespec limit;
		clock_gettime(CLOCK_REALTIME, &limit);
		limit.tv_sec += IDLE_LIMIT_S;
		while (received == before &&
		       pthread_cond_timedwait(&changed, &lock, &limit) == 0)
			;
		if (received == before) {
			fprintf(stderr, "%ld of %ld messages, then none for %d s\n",
				received, count, IDLE_LIMIT_S);
			return 1;
		}
	}
	pthread_mutex_unlock(&lock);
	qsort(latencies_us, count, sizeof *latencies_us, by_value);
	printf("received %ld\n", received);
	printf("span_us %.0f\n", last_arrival_us - first_stamp_us);
	printf("p50_us %.0f\n", nearest_rank(0.50));
	printf("p99_us %.0f\n", nearest_rank(0.99));
	fflush(stdout);
	mosquitto_disconnect(m);
	mosquitto_loop_stop(m, false);
	mosquitto_destroy(m);
	mosquitto_lib_cleanup();
	return 0;
}
