/*
 * A QoS 1 publisher on libmosquitto at its defaults (MQTT 3.1.1, no
 * TCP_NODELAY, 20 messages in flight), for the benchmark.
 *
 *   mosq_pub PORT TOPIC COUNT AHEAD [PAYLOAD_BYTES]
 *
 * Publishes COUNT QoS 1 messages to TOPIC on 127.0.0.1:PORT, keeping at
 * most AHEAD published and not yet acknowledged (libmosquitto itself puts
 * at most 20 of them on the wire; AHEAD 1 is a sensor waiting for each
 * PUBACK). Each payload of 8 bytes or more starts with the CLOCK_MONOTONIC
 * time in microseconds (a double) at which it was handed to the library,
 * for mosq_sub's end-to-end latency. Prints `elapsed_us N` once every
 * PUBACK has arrived.
 */
#include <mosquitto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static long acked;
static int connected;

static void on_connect(struct mosquitto *m, void *u, int rc)
{
	(void)m; (void)u;
	pthread_mutex_lock(&lock);
	connected = rc == 0 ? 1 : -1;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void on_publish(struct mosquitto *m, void *u, int mid)
{
	(void)m; (void)u; (void)mid;
	pthread_mutex_lock(&lock);
	acked++;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: %s PORT TOPIC COUNT AHEAD [PAYLOAD_BYTES]\n", argv[0]);
		return 2;
	}
	int port = atoi(argv[1]);
	const char *topic = argv[2];
	long count = atol(argv[3]);
	long ahead = atol(argv[4]);
	int size = argc > 5 ? atoi(argv[5]) : 64;
	char *payload = calloc(1, size > 0 ? size : 1);
	memset(payload, 'p', size);

	mosquitto_lib_init();
	struct mosquitto *m = mosquitto_new(NULL, true, NULL);
	mosquitto_connect_callback_set(m, on_connect);
	mosquitto_publish_callback_set(m, on_publish);
	if (mosquitto_connect(m, "127.0.0.1", port, 60) != MOSQ_ERR_SUCCESS ||
	    mosquitto_loop_start(m) != MOSQ_ERR_SUCCESS) {
		fprintf(stderr, "cannot connect to port %d\n", port);
		return 1;
	}
	struct timespec limit;
	pthread_mutex_lock(&lock);
	while (connected == 0) {
		clock_gettime(CLOCK_REALTIME, &limit);
		limit.tv_sec += 10;
		if (pthread_cond_timedwait(&changed, &lock, &limit) != 0)
			break;
	}
	pthread_mutex_unlock(&lock);
	if (connected != 1) {
		fprintf(stderr, "no CONNACK\n");
		return 1;
	}
	double start = now_us();
	for (long sent = 0; sent < count; sent++) {
		pthread_mutex_lock(&lock);
		while (sent - acked >= ahead)
			pthread_cond_wait(&changed, &lock);
		pthread_mutex_unlock(&lock);
		if (size >= (int)sizeof(double)) {
			double stamp = now_us();
			memcpy(payload, &stamp, sizeof stamp);
		}
		if (mosquitto_publish(m, NULL, topic, size, payload, 1, false) != MOSQ_ERR_SUCCESS) {
			fprintf(stderr, "publish %ld failed\n", sent);
			return 1;
		}
	}
	pthread_mutex_lock(&lock);
	while (acked < count) {
		clock_gettime(CLOCK_REALTIME, &limit);
		limit.tv_sec += 60;
		if (pthread_cond_timedwait(&changed, &lock, &limit) != 0) {
			fprintf(stderr, "%ld of %ld acknowledged in time\n", acked, count);
			return 1;
		}
	}
	pthread_mutex_unlock(&lock);
	printf("elapsed_us %.0f\n", now_us() - start);
	mosquitto_disconnect(m);
	mosquitto_loop_stop(m, false);
	mosquitto_destroy(m);
	mosquitto_lib_cleanup();
	return 0;
}
