package bench

import "fmt"

// compareProtocols remembers each classic point's rate and, for the same
// point measured with another HA protocol, reports its share of classic's
// (Config.Protocols; the ratio the autoswitch protocol's cost is judged by).
func (r *runner) compareProtocols(res Result) {
	if len(r.cfg.Protocols) < 2 {
		return
	}
	rate := res.MsgsPerS
	unit := "msgs/s"
	if res.Scenario == Catchup || rate == nil {
		rate, unit = res.MBPerS, "MB/s"
	}
	if rate == nil {
		return
	}
	prod := 0
	if res.Producers != nil {
		prod = *res.Producers
	}
	key := fmt.Sprintf("%s/%s/%s/%d", res.Scenario, res.Via, res.Store, prod)
	if res.Protocol == ProtocolClassic {
		if r.byPoint == nil {
			r.byPoint = map[string]float64{}
		}
		r.byPoint[key] = *rate
		return
	}
	if c, ok := r.byPoint[key]; ok && c > 0 {
		point := fmt.Sprintf("%s via %s, %s store", res.Scenario, res.Via, res.Store)
		if res.Producers != nil {
			point += fmt.Sprintf(", %d producers", prod)
		}
		r.progress("%s: %s %.0f %s = %.3f of classic's %.0f", point, res.Protocol, *rate, unit, *rate/c, c)
	}
}
